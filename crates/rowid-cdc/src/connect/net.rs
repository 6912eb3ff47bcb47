//! The SQL connections (start checks, heartbeats, a PostgreSQL sink): the socket, TLS as
//! `sslmode` says ([`crate::connect::tls`]), and a watch on the authentication exchange that refuses
//! to send a password in clear text over a connection without TLS. tokio-postgres speaks the
//! protocol over the stream this module hands it.
//!
//! What the server asked for is kept ([`Session`]): the replication client cannot be told to
//! refuse clear text itself, so the command gives it the password only when the SQL
//! connection to the same server, database and role saw it ask for SCRAM or run over TLS
//! (pg_hba.conf picks the method from exactly those, so the replication connection meets the
//! same one).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::{Client, Connection, NoTls};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::connect::conninfo::{Conninfo, Host, SslMode};
use crate::connect::tls;

/// How the server authenticated the connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    /// No password was asked for (trust, peer, a certificate).
    #[default]
    NoPassword,
    /// `password`: the password in clear text.
    Cleartext,
    /// `md5`.
    Md5,
    /// SCRAM-SHA-256.
    Scram,
    /// Another method (its code).
    Other(i32),
}

/// What the connection turned out to be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// It runs over TLS.
    pub tls: bool,
    /// How the server authenticated it.
    pub auth: Auth,
    /// With TLS: the DNS names of the server's certificate (its subject alternative names).
    pub certificate_names: Vec<String>,
}

impl Session {
    /// The replication connection may be given the password: the server was seen to take it
    /// over TLS or by SCRAM (which never sends it), never in clear text on the wire.
    pub fn password_safe(&self) -> bool {
        self.tls || self.auth == Auth::Scram
    }
}

/// Why a connection could not be made.
#[derive(Debug)]
pub struct ConnectError {
    /// What went wrong (the server's message with its SQLSTATE, or the cause chain).
    pub message: String,
    /// Retrying can cure it (the server unreachable, restarting, the connection lost).
    pub transient: bool,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConnectError {}

/// A tokio-postgres error as a message: its SQLSTATE and text, or its cause chain; and
/// whether it is transient, cured by trying the transaction again ([`transient`], or I/O).
pub fn describe(e: &tokio_postgres::Error) -> (String, bool) {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            (format!("{}: {}", code, db.message()), transient(code))
        }
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            let mut io = false;
            while let Some(cause) = source {
                io |= cause.is::<io::Error>();
                s.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            (s, e.is_closed() || io)
        }
    }
}

/// Whether an error of SQLSTATE `code` is one that trying the transaction again can cure,
/// not a fact about the data: the connection (class 08), the server shutting down,
/// restarting or cancelling the statement (class 57, a `statement_timeout` included), a lock
/// not granted in time (55P03), a deadlock or serialization failure (40P01, 40001), or
/// insufficient resources (class 53: disk full, out of memory, too many connections).
pub fn transient(code: &str) -> bool {
    ["08", "57", "53"]
        .iter()
        .any(|class| code.starts_with(class))
        || ["55P03", "40P01", "40001"].contains(&code)
}

/// The database `client` is connected to as `system_identifier/database OID`, when its role
/// may read the control data (`pg_control_system()`): two connections with the same value are
/// to the same database of the same cluster.
pub async fn database_id(client: &Client) -> Option<String> {
    client
        .query_opt(
            "SELECT (SELECT system_identifier FROM pg_catalog.pg_control_system())::pg_catalog.text \
             OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) d.oid::pg_catalog.text \
             FROM pg_catalog.pg_database d \
             WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database() \
               AND pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')",
            &[],
        )
        .await
        .ok()
        .flatten()
        .map(|r| r.get(0))
}

/// A plain socket.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The socket, or TLS over it.
enum Stream {
    Plain(Socket),
    Tls(Box<TlsStream<Socket>>),
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Socket::Tcp($s) => $e,
            Socket::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What the watch has read of the server's messages so far.
#[derive(Debug, Default)]
struct Watch {
    /// Bytes of the current message's header (tag and length) read so far.
    header: Vec<u8>,
    /// Body bytes of the current message still to come.
    remaining: usize,
    /// The current message is an authentication request: its code's bytes so far.
    code: Option<Vec<u8>>,
    /// ReadyForQuery or an error was seen: nothing more to watch.
    done: bool,
    /// The server asked for the password in clear text without TLS.
    refused: bool,
    session: Session,
}

impl Watch {
    /// Reads `bytes` the server sent; false when they ask for what must not be sent.
    fn read(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() && !self.done {
            if self.remaining == 0 && self.code.is_none() {
                let need = 5 - self.header.len();
                let take = need.min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.header.len() < 5 {
                    break;
                }
                let tag = self.header[0];
                let len = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]) as usize;
                self.header.clear();
                self.remaining = len.saturating_sub(4);
                match tag {
                    b'R' => self.code = Some(Vec::with_capacity(4)),
                    b'Z' | b'E' => self.done = true,
                    _ => {}
                }
                continue;
            }
            let take = self.remaining.min(bytes.len());
            if let Some(code) = &mut self.code {
                let want = 4usize.saturating_sub(code.len()).min(take);
                code.extend_from_slice(&bytes[..want]);
                if code.len() == 4 {
                    let c = i32::from_be_bytes([code[0], code[1], code[2], code[3]]);
                    match c {
                        0 => {}
                        3 => {
                            self.session.auth = Auth::Cleartext;
                            if !self.session.tls {
                                self.refused = true;
                                return false;
                            }
                        }
                        5 => self.session.auth = Auth::Md5,
                        10..=12 => self.session.auth = Auth::Scram,
                        other => self.session.auth = Auth::Other(other),
                    }
                }
            }
            self.remaining -= take;
            bytes = &bytes[take..];
            if self.remaining == 0 {
                self.code = None;
            }
        }
        true
    }
}

/// The stream tokio-postgres reads, watched until authentication is over.
struct Watched {
    inner: Stream,
    watch: Arc<Mutex<Watch>>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled
            && let Ok(mut w) = this.watch.lock()
            && !w.done
            && !w.read(&buf.filled()[before..])
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the server asked for the password in clear text",
            )));
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A connection made by [`connect`]: drive `connection` (spawn it) to use `client`.
pub struct Connected {
    /// The client.
    pub client: Client,
    /// The connection's I/O; it must be polled (spawned) for the client to work.
    pub connection: Connection<Box<dyn AsyncReadWrite>, tokio_postgres::tls::NoTlsStream>,
    /// What the connection turned out to be.
    pub session: Session,
}

/// A stream tokio-postgres can run over.
pub trait AsyncReadWrite: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncReadWrite for T {}

fn failure(what: &str, e: impl std::fmt::Display, transient: bool) -> ConnectError {
    ConnectError {
        message: format!("{what}: {e}"),
        transient,
    }
}

async fn socket(info: &Conninfo) -> Result<Socket, ConnectError> {
    let what = format!("cannot connect to {}", info.describe());
    match (&info.host, info.tcp_target()) {
        (Host::Unix(dir), None) => {
            let path = dir.join(format!(".s.PGSQL.{}", info.port));
            UnixStream::connect(&path)
                .await
                .map(Socket::Unix)
                .map_err(|e| failure(&what, format!("{}: {e}", path.display()), true))
        }
        (_, Some(target)) => {
            let s = TcpStream::connect((target.as_str(), info.port))
                .await
                .map_err(|e| failure(&what, e, true))?;
            let _ = s.set_nodelay(true);
            Ok(Socket::Tcp(s))
        }
        (Host::Tcp(_), None) => Err(failure(&what, "no address", false)),
    }
}

/// The TLS negotiation libpq does: SSLRequest, then a handshake if the server agrees.
async fn negotiate(info: &Conninfo, mut sock: Socket) -> Result<Stream, ConnectError> {
    let what = format!("cannot connect to {}", info.describe());
    let mode = tls::effective_mode(info);
    if mode == SslMode::Disable || matches!(sock, Socket::Unix(_)) {
        return Ok(Stream::Plain(sock));
    }
    let config = tls::client_config(info).map_err(|e| failure(&what, e, false))?;
    let Some(config) = config else {
        return Ok(Stream::Plain(sock));
    };
    // SSLRequest: length 8, code 80877103.
    sock.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .map_err(|e| failure(&what, e, true))?;
    let mut answer = [0u8; 1];
    sock.read_exact(&mut answer)
        .await
        .map_err(|e| failure(&what, e, true))?;
    match answer[0] {
        b'S' => {
            let name = tls::server_name(info).map_err(|e| failure(&what, e, false))?;
            let stream = TlsConnector::from(config)
                .connect(name, sock)
                .await
                .map_err(|e| failure(&what, format!("TLS handshake failed: {e}"), false))?;
            Ok(Stream::Tls(Box::new(stream)))
        }
        b'N' if mode == SslMode::Prefer => Ok(Stream::Plain(sock)),
        b'N' => Err(failure(
            &what,
            format!("sslmode={} but the server does not accept TLS", mode.name()),
            false,
        )),
        other => Err(failure(
            &what,
            format!("unexpected answer {other:#04x} to the TLS request"),
            false,
        )),
    }
}

/// The DNS names the server's certificate (the first of `chain`) is valid for.
fn certificate_names(chain: Option<&[rustls::pki_types::CertificateDer<'static>]>) -> Vec<String> {
    let Some(cert) = chain.and_then(|c| c.first()) else {
        return Vec::new();
    };
    match webpki::EndEntityCert::try_from(cert) {
        Ok(end) => end.valid_dns_names().map(str::to_string).collect(),
        Err(_) => Vec::new(),
    }
}

/// Connects an SQL session to the server `info` names, with TLS as it says, refusing to
/// send a password in clear text without TLS.
pub async fn connect(info: &Conninfo) -> Result<Connected, ConnectError> {
    let timeout = info.connect_timeout.unwrap_or(Duration::from_secs(30));
    match tokio::time::timeout(timeout, connect_inner(info)).await {
        Ok(r) => r,
        Err(_) => Err(failure(
            &format!("cannot connect to {}", info.describe()),
            format!("no answer within {} s", timeout.as_secs()),
            true,
        )),
    }
}

async fn connect_inner(info: &Conninfo) -> Result<Connected, ConnectError> {
    let what = format!("cannot connect to {}", info.describe());
    let stream = negotiate(info, socket(info).await?).await?;
    let (tls, certificate_names) = match &stream {
        Stream::Tls(s) => (true, certificate_names(s.get_ref().1.peer_certificates())),
        Stream::Plain(_) => (false, Vec::new()),
    };
    let watch = Arc::new(Mutex::new(Watch {
        session: Session {
            tls,
            auth: Auth::NoPassword,
            certificate_names,
        },
        ..Watch::default()
    }));
    let watched: Box<dyn AsyncReadWrite> = Box::new(Watched {
        inner: stream,
        watch: watch.clone(),
    });
    let mut config = tokio_postgres::Config::new();
    config
        .user(&info.user)
        .dbname(&info.dbname)
        .application_name("rowid-cdc")
        .ssl_mode(PgSslMode::Disable);
    if let Some(p) = &info.password {
        config.password(p.expose());
    }
    if let Some(o) = &info.options {
        config.options(o);
    }
    let result = config.connect_raw(watched, NoTls).await;
    let w = watch
        .lock()
        .map(|w| (w.refused, w.session.clone()))
        .unwrap_or_default();
    match result {
        Ok((client, connection)) => Ok(Connected {
            client,
            connection,
            session: w.1,
        }),
        Err(_) if w.0 => Err(failure(
            &what,
            "the server asks for the password in clear text and the connection has no TLS: \
             refused (use scram-sha-256 in pg_hba.conf, or connect with sslmode=require or \
             stronger)",
            false,
        )),
        Err(e) => {
            let (message, transient) = describe(&e);
            Err(failure(&what, message, transient))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth_request(code: i32, extra: &[u8]) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend_from_slice(&(8 + extra.len() as u32).to_be_bytes());
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(extra);
        m
    }

    #[test]
    fn the_watch_refuses_clear_text_without_tls_in_any_split() {
        let stream = auth_request(3, &[]);
        for split in 0..=stream.len() {
            let mut w = Watch::default();
            let ok = w.read(&stream[..split]) && w.read(&stream[split..]);
            assert!(!ok && w.refused, "split at {split}");
        }
        let mut w = Watch {
            session: Session {
                tls: true,
                ..Session::default()
            },
            ..Watch::default()
        };
        assert!(w.read(&stream));
        assert_eq!(w.session.auth, Auth::Cleartext);
    }

    #[test]
    fn the_watch_records_scram_and_stops_at_ready_for_query() {
        let mut bytes = auth_request(10, b"SCRAM-SHA-256\0\0");
        bytes.extend(auth_request(11, b"server-first"));
        bytes.extend(auth_request(12, b"server-final"));
        bytes.extend(auth_request(0, &[]));
        bytes.extend([b'S', 0, 0, 0, 8, b'a', 0, b'b', 0]);
        bytes.extend([b'Z', 0, 0, 0, 5, b'I']);
        // After ReadyForQuery nothing is inspected (a later 'R' is not an auth request).
        bytes.extend(auth_request(3, &[]));
        let mut w = Watch::default();
        for chunk in bytes.chunks(3) {
            assert!(w.read(chunk));
        }
        assert!(w.done);
        assert_eq!(w.session.auth, Auth::Scram);
        assert!(w.session.password_safe());
        assert!(!Session::default().password_safe());
    }
}
