//! The NATS JetStream sink (`--sink nats:URL`): every change as its JSON line into a
//! JetStream stream, exactly once, on subject `PREFIX.<database>.<schema>.<table>`, with
//! headers naming the relation, the operation, the commit LSN and the identity
//! (spec/nats.md).
//!
//! Data flow: [`NatsSink`] (the [`Sink`] the pipeline calls, on the stream's thread) writes
//! each event's JSON line and headers and sends it through a bounded channel to the sink's
//! thread, which runs one task on a single-threaded runtime of its own: it takes what the
//! channel holds, publishes it with `async-nats` (whose connection runs on that same thread:
//! no hop between threads per message) and keeps the acknowledgements' futures; at the
//! transaction's commit it waits for every acknowledgement of the transaction's changes, then
//! publishes the slot's commit marker and waits for its acknowledgement. Publishing is pipelined: no message waits for the one
//! before it to be acknowledged.
//!
//! Invariants: every message carries `Nats-Msg-Id` = slot, commit LSN and its sequence in the
//! transaction, so a transaction sent again after a crash is dropped by the server's
//! de-duplication; a transaction is reported durable only after JetStream acknowledged every
//! change of it and its commit marker, so the slot's position never passes a message the
//! stream does not hold. The slot's markers (`PREFIX._slot.<slot>`: `open` before a
//! transaction's first change, `commit` after its last) tell a restarted run where the stream
//! stands without a local file ([`Sink::delivered`]); an `open` marker older than the stream's
//! de-duplication window means changes of an unfinished transaction that a resend would no
//! longer de-duplicate: refused, naming the stream, not ignored.

pub mod subject;

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::stream::{Config, DiscardPolicy, RetentionPolicy, StorageType};
use bytes::Bytes;
use tokio::sync::Notify;

use self::subject::{Marker, ReadMarker};
use crate::event::ChangeEvent;
use crate::lsn::Lsn;
use crate::sink::{Durable, Sink};

/// Messages between the stream's thread and the sink's at most (the stream waits beyond).
const CHANNEL_MESSAGES: usize = 1024;

/// Publications awaiting their acknowledgement at most; the oldest is awaited beyond.
const PENDING_ACKS: usize = 4096;

/// The de-duplication window of a stream this sink creates.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// How long an acknowledgement may take before the connection is taken as lost.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening is tried again while the servers do not answer or elect their leaders.
const OPEN_RETRY: Duration = Duration::from_secs(120);

/// How the sink authenticates and protects its connection. Secrets come from the environment,
/// never from the command line; `Debug` never shows them.
#[derive(Clone, Default)]
pub struct NatsAuth {
    /// A credentials file (JWT and NKey seed).
    pub creds: Option<std::path::PathBuf>,
    /// A token (`ROWID_CDC_NATS_TOKEN`).
    pub token: Option<String>,
    /// User and password (`ROWID_CDC_NATS_USER`, `ROWID_CDC_NATS_PASSWORD`).
    pub user: Option<(String, String)>,
    /// Require TLS (also implied by `tls://` URLs and the files below).
    pub tls: bool,
    /// Root certificates to verify the servers with (PEM).
    pub tls_ca: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM).
    pub tls_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsAuth")
            .field("creds", &self.creds)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("user", &self.user.as_ref().map(|(u, _)| (u, "<hidden>")))
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .finish()
    }
}

/// `text` with every secret of `target` (passwords in its URLs, its password and token)
/// replaced, whatever a library put into an error message.
fn hide_secrets(text: &str, target: &NatsTarget) -> String {
    let mut secrets: Vec<String> = Vec::new();
    for u in target.urls.split(',') {
        if let (Some(scheme), Some(at)) = (u.find("://"), u.rfind('@'))
            && at > scheme
        {
            secrets.push(u[scheme + 3..at].to_string());
        }
    }
    secrets.extend(target.auth.token.clone());
    secrets.extend(target.auth.user.as_ref().map(|(_, p)| p.clone()));
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(s.as_str(), "<hidden>");
    }
    out
}

/// The user information of the first of `urls` that carries one: `user:password` or a token,
/// percent-decoded (the client does not read it from the URL itself).
fn url_credentials(urls: &str) -> Option<(String, Option<String>)> {
    urls.split(',').find_map(|u| {
        let u = u.trim();
        let scheme = u.find("://")?;
        let at = u.rfind('@').filter(|at| *at > scheme)?;
        let info = &u[scheme + 3..at];
        Some(match info.split_once(':') {
            Some((user, password)) => (percent_decode(user), Some(percent_decode(password))),
            None => (percent_decode(info), None),
        })
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `urls` without the user information any of them carries (for messages).
pub fn describe_urls(urls: &str) -> String {
    urls.split(',')
        .map(|u| {
            let u = u.trim();
            match (u.find("://"), u.rfind('@')) {
                (Some(scheme), Some(at)) if at > scheme => {
                    format!("{}://{}", &u[..scheme], &u[at + 1..])
                }
                _ => u.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where and how the sink publishes.
#[derive(Clone, Debug)]
pub struct NatsTarget {
    /// The servers, comma-separated `nats://` (or `tls://`) URLs.
    pub urls: String,
    /// The stream (created when missing).
    pub stream: String,
    /// Replicas of a stream this sink creates.
    pub replicas: usize,
    /// The subjects' first tokens.
    pub prefix: String,
    /// The slot (message ids and markers).
    pub slot: String,
    /// The captured database's name (the subjects' second token).
    pub database: String,
    /// No state file yet: the stream must hold nothing of this slot.
    pub fresh: bool,
    /// Credentials and TLS.
    pub auth: NatsAuth,
    /// Where the publications awaiting acknowledgement are counted (`--metrics`).
    pub acks_pending: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// One publication for the sink's thread.
#[derive(Debug)]
enum Cmd {
    Publish {
        subject: String,
        id: String,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
    },
    /// Every publication so far acknowledged, then this one (a transaction's commit marker)
    /// published and acknowledged: answer on the reply channel. The marker says the
    /// transaction is whole in the stream, so it is sent only once it is.
    Commit {
        subject: String,
        id: String,
        body: Bytes,
    },
}

/// The NATS JetStream sink.
#[derive(Debug)]
pub struct NatsSink {
    target: NatsTarget,
    cmds: Option<Outbox>,
    replies: Receiver<io::Result<()>>,
    thread: Option<JoinHandle<()>>,
    /// The last transaction the stream held whole when the sink was opened.
    delivered: Option<Lsn>,
    /// The last transaction committed through this sink (or `delivered`).
    last_commit: Option<Lsn>,
    /// The open transaction: its commit LSN and the changes sent of it.
    open: Option<(Lsn, u64)>,
    /// What the stream holds of the transaction the slot left unfinished, until it commits.
    held: Option<Held>,
    line: String,
}

impl NatsSink {
    /// Connects, creates the stream when missing (refusing one whose subjects do not hold the
    /// prefix's), and reads where the slot's markers say the stream stands.
    pub fn open(target: NatsTarget) -> io::Result<NatsSink> {
        if !subject::valid_prefix(&target.prefix) {
            return Err(io::Error::other(format!(
                "--nats-subject-prefix {:?}: not dot-separated tokens without wildcards",
                target.prefix
            )));
        }
        let (cmds, inbox) = channel();
        let (to_sink, replies) = sync_channel::<io::Result<()>>(1);
        let (opened, on_open) = sync_channel::<io::Result<Opened>>(1);
        let for_thread = target.clone();
        let thread = std::thread::Builder::new()
            .name("nats-sink".into())
            .spawn(move || serve(for_thread, inbox, to_sink, opened))?;
        let (last, held) = on_open
            .recv()
            .map_err(|_| io::Error::other("the NATS sink's thread ended while opening"))??;
        let delivered = match last {
            None => None,
            Some(m) if m.marker == Marker::Commit => Some(m.commit_lsn),
            Some(m) => m.after,
        };
        Ok(NatsSink {
            target,
            cmds: Some(cmds),
            replies,
            thread: Some(thread),
            delivered,
            last_commit: delivered,
            open: None,
            held,
            line: String::new(),
        })
    }

    /// Whether the stream already holds the change `seq` (`None`: the open marker) of the
    /// transaction committing at `commit_lsn`: part of the unfinished transaction the slot
    /// left, sent again.
    fn holds(&self, commit_lsn: Lsn, seq: Option<u64>) -> bool {
        self.held.as_ref().is_some_and(|h| {
            h.commit_lsn == commit_lsn && seq.is_none_or(|seq| h.changes.contains(&seq))
        })
    }

    fn send(&self, cmd: Cmd) -> io::Result<()> {
        self.cmds
            .as_ref()
            .and_then(|c| c.send(cmd).ok())
            .ok_or_else(|| self.lost())
    }

    /// The thread ended (its error, when it had one, is on the reply channel).
    fn lost(&self) -> io::Error {
        match self.replies.try_recv() {
            Ok(Err(e)) => e,
            _ => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("NATS stream {}: the connection ended", self.target.stream),
            ),
        }
    }

    /// The slot's `marker` for the transaction committing at `commit_lsn`: its subject, id
    /// and body.
    fn marker(&self, marker: Marker, commit_lsn: Lsn, changes: u64) -> (String, String, Bytes) {
        let t = &self.target;
        (
            subject::marker_subject(&t.prefix, &t.slot),
            subject::marker_id(&t.slot, commit_lsn, marker),
            Bytes::from(subject::marker_body(
                marker,
                commit_lsn,
                self.last_commit,
                changes,
            )),
        )
    }
}

impl Sink for NatsSink {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        let seq = match self.open {
            Some((lsn, n)) if lsn == event.commit_lsn => n,
            _ => {
                if !self.holds(event.commit_lsn, None) {
                    let (subject, id, body) = self.marker(Marker::Open, event.commit_lsn, 0);
                    self.send(Cmd::Publish {
                        subject,
                        id,
                        headers: Vec::new(),
                        body,
                    })?;
                }
                0
            }
        };
        self.open = Some((event.commit_lsn, seq + 1));
        if self.holds(event.commit_lsn, Some(seq)) {
            return Ok(());
        }
        self.line.clear();
        crate::json_line::write(event, &mut self.line);
        let (schema, table) = event
            .relation
            .split_once('.')
            .unwrap_or(("", &event.relation));
        let schema = event
            .schema
            .as_ref()
            .map_or(schema, |s| s.namespace.as_str());
        let table = event.schema.as_ref().map_or(table, |s| s.relname.as_str());
        let t = &self.target;
        self.send(Cmd::Publish {
            subject: subject::change_subject(&t.prefix, &t.database, schema, table),
            id: subject::change_id(&t.slot, event.commit_lsn, seq),
            headers: subject::change_headers(event),
            body: Bytes::copy_from_slice(self.line.as_bytes()),
        })
    }

    fn commit(&mut self) -> io::Result<Durable> {
        let Some((lsn, changes)) = self.open.take() else {
            return Ok(Durable::at(self.last_commit));
        };
        let (subject, id, body) = self.marker(Marker::Commit, lsn, changes);
        self.send(Cmd::Commit { subject, id, body })?;
        match self.replies.recv() {
            Ok(Ok(())) => {
                self.last_commit = Some(lsn);
                self.held = None;
                Ok(Durable::at(self.last_commit))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(self.lost()),
        }
    }

    fn durable(&self) -> Durable {
        Durable::at(self.last_commit)
    }

    fn delivered(&self) -> Option<Lsn> {
        self.delivered
    }

    fn describe(&self) -> String {
        format!("NATS stream {}", self.target.stream)
    }
}

impl Drop for NatsSink {
    fn drop(&mut self) {
        self.cmds = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An error of the NATS connection: retried by a reconnection.
fn lost(stream: &str, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("NATS stream {stream}: {what}"),
    )
}

/// The stream's end of the channel to the sink's thread.
#[derive(Debug)]
struct Outbox {
    /// `None` only while dropping.
    sender: Option<SyncSender<Cmd>>,
    wake: Arc<Notify>,
}

impl Outbox {
    /// Sends `cmd`, waiting while the channel is full; fails once the sink's thread ended.
    fn send(&self, cmd: Cmd) -> Result<(), ()> {
        let sender = self.sender.as_ref().ok_or(())?;
        sender.send(cmd).map_err(|_| ())?;
        self.wake.notify_one();
        Ok(())
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // Closed first, then woken: the task's next look finds the channel closed. (Woken
        // first, it could look before the close, find it empty and wait for good.)
        drop(self.sender.take());
        self.wake.notify_one();
    }
}

/// The sink's thread's end: a `std` channel (the stream's thread sends from inside its own
/// runtime, where a tokio channel's blocking send is not allowed) and a [`Notify`] that wakes
/// the sink's task when the channel had been empty.
struct Inbox {
    receiver: Receiver<Cmd>,
    wake: Arc<Notify>,
}

impl Inbox {
    /// The next command, or `None` once the stream's end is dropped.
    async fn next(&self) -> Option<Cmd> {
        loop {
            match self.receiver.try_recv() {
                Ok(cmd) => return Some(cmd),
                Err(TryRecvError::Disconnected) => return None,
                // A send after this look leaves a permit: `notified` then returns at once.
                Err(TryRecvError::Empty) => self.wake.notified().await,
            }
        }
    }
}

/// A channel of [`CHANNEL_MESSAGES`] commands from the stream's thread to the sink's.
fn channel() -> (Outbox, Inbox) {
    let (sender, receiver) = sync_channel::<Cmd>(CHANNEL_MESSAGES);
    let wake = Arc::new(Notify::new());
    (
        Outbox {
            sender: Some(sender),
            wake: wake.clone(),
        },
        Inbox { receiver, wake },
    )
}

/// The sink's thread: connects and checks (the answer on `opened`), then publishes what the
/// stream's thread sends until the channel closes; a failure is left on `replies` for the
/// stream's thread to find at its next send or commit.
fn serve(
    target: NatsTarget,
    inbox: Inbox,
    replies: SyncSender<io::Result<()>>,
    opened: SyncSender<io::Result<Opened>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = opened.send(Err(e));
            return;
        }
    };
    runtime.block_on(async {
        let connected = match connect_retrying(&target).await {
            Ok(connected) => {
                let _ = opened.send(Ok((connected.last.clone(), connected.held.clone())));
                connected
            }
            Err(e) => {
                let _ = opened.send(Err(e));
                return;
            }
        };
        if let Err(e) = publish_all(&target, &connected, &inbox, &replies).await {
            let _ = replies.try_send(Err(e));
        }
    });
}

/// Publishes every command of `inbox` (acknowledgements pipelined, at most [`PENDING_ACKS`]
/// awaited at once) and answers each flush on `replies` once all before it are acknowledged.
async fn publish_all(
    target: &NatsTarget,
    connected: &Connected,
    inbox: &Inbox,
    replies: &SyncSender<io::Result<()>>,
) -> io::Result<()> {
    let mut pending: VecDeque<PublishAckFuture> = VecDeque::new();
    let count = |pending: &VecDeque<PublishAckFuture>| {
        if let Some(gauge) = &target.acks_pending {
            gauge.store(pending.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    };
    while let Some(cmd) = inbox.next().await {
        match cmd {
            Cmd::Publish {
                subject,
                id,
                headers,
                body,
            } => {
                if body.len() > connected.max_payload {
                    return Err(too_large(target, connected, &subject, &id, &headers, &body));
                }
                let mut map = async_nats::HeaderMap::new();
                if crate::fault::nats_message_ids() {
                    map.insert("Nats-Msg-Id", id.as_str());
                }
                for (name, value) in &headers {
                    map.insert(*name, value.as_str());
                }
                let ack = connected
                    .js
                    .publish_with_headers(subject, map, body)
                    .await
                    .map_err(|e| lost(&target.stream, format!("publish failed: {e}")))?;
                pending.push_back(ack);
                if pending.len() > PENDING_ACKS
                    && let Some(oldest) = pending.pop_front()
                {
                    acknowledged(target, oldest).await?;
                }
                count(&pending);
            }
            Cmd::Commit { subject, id, body } => {
                let mut all = Ok(());
                while let Some(ack) = pending.pop_front() {
                    all = acknowledged(target, ack).await;
                    if all.is_err() {
                        break;
                    }
                }
                count(&pending);
                // Only a transaction the stream holds whole gets its commit marker: a restart
                // trusts the marker and skips the transaction.
                if all.is_ok() {
                    crate::fault::at(crate::fault::Point::BeforeNatsCommitMarker);
                    all = match connected
                        .js
                        .publish_with_headers(subject, marker_headers(&id), body)
                        .await
                    {
                        Ok(ack) => acknowledged(target, ack).await,
                        Err(e) => Err(lost(&target.stream, format!("publish failed: {e}"))),
                    };
                }
                let answer = all.as_ref().map(|_| ()).map_err(clone_error);
                if replies.send(answer).is_err() {
                    return Ok(());
                }
                all?;
            }
        }
    }
    Ok(())
}

/// The headers of a marker: its message id only.
fn marker_headers(id: &str) -> async_nats::HeaderMap {
    let mut map = async_nats::HeaderMap::new();
    if crate::fault::nats_message_ids() {
        map.insert("Nats-Msg-Id", id);
    }
    map
}

/// Waits for one publication's acknowledgement (up to [`ACK_TIMEOUT`]).
/// A refusal stops the run; any other failure is a lost connection, retried.
async fn acknowledged(target: &NatsTarget, ack: PublishAckFuture) -> io::Result<()> {
    let answer = tokio::time::timeout(ACK_TIMEOUT, ack)
        .await
        .map_err(|_| lost(&target.stream, "no acknowledgement within 10 s"))?;
    match answer {
        Ok(_) => Ok(()),
        Err(e) => match refusal(&e) {
            Some(reason) => Err(io::Error::other(format!(
                "NATS stream {} refused a message: {reason}; make room in the stream or raise \
                 its limits, then start again (the slot stands before the refused transaction)",
                target.stream
            ))),
            None => Err(lost(
                &target.stream,
                format!("publish not acknowledged: {e}"),
            )),
        },
    }
}

/// The server's answer when the stream refused the message for good: its limits under
/// `discard new` (maximum messages, bytes or messages per subject: error 10077), its largest
/// message or headers (10054, 10097), or the account's storage (10047, 10028). Sending it
/// again gets the same answer, so it is not a lost connection.
fn refusal(
    e: &async_nats::jetstream::context::PublishError,
) -> Option<&async_nats::jetstream::Error> {
    use async_nats::jetstream::ErrorCode as C;
    let refused = [
        C::STREAM_STORE_FAILED,
        C::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
        C::STREAM_HEADER_EXCEEDS_MAXIMUM,
        C::STORAGE_RESOURCES_EXCEEDED,
        C::MEMORY_RESOURCES_EXCEEDED,
    ];
    std::error::Error::source(e)?
        .downcast_ref::<async_nats::jetstream::Error>()
        .filter(|js| refused.contains(&js.error_code()))
}

/// The error of a change larger than the servers' `max_payload`, naming its relation.
fn too_large(
    target: &NatsTarget,
    connected: &Connected,
    subject: &str,
    id: &str,
    headers: &[(&'static str, String)],
    body: &[u8],
) -> io::Error {
    let relation = headers
        .iter()
        .find(|(n, _)| *n == "Rowid-Relation")
        .map_or(subject, |(_, v)| v.as_str());
    io::Error::other(format!(
        "NATS stream {}: a change of {relation} (message {id}) is {} bytes, more than the \
         servers' max_payload ({} bytes); raise max_payload in the servers' configuration",
        target.stream,
        body.len(),
        connected.max_payload
    ))
}

fn clone_error(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

/// What opening found: the slot's last marker, and what the stream holds of the transaction
/// it left unfinished.
type Opened = (Option<ReadMarker>, Option<Held>);

/// A connection to the servers, checked: the stream's context, the slot's last marker, what
/// the stream holds of an unfinished transaction, and the largest message the servers take.
struct Connected {
    js: async_nats::jetstream::Context,
    last: Option<ReadMarker>,
    held: Option<Held>,
    max_payload: usize,
}

/// What the stream holds of a transaction the slot left unfinished (its `open` marker last).
#[derive(Clone, Debug)]
pub struct Held {
    /// The transaction's commit LSN.
    commit_lsn: Lsn,
    /// The sequences (in the transaction, from 0) of its changes the stream holds.
    changes: std::collections::HashSet<u64>,
}

/// [`connect`], tried again with backoff (250 ms doubling to 5 s, a line on stderr each time)
/// for up to [`OPEN_RETRY`] while the failure is one a server coming back or a cluster
/// electing its leaders cures.
async fn connect_retrying(target: &NatsTarget) -> io::Result<Connected> {
    let started = std::time::Instant::now();
    let mut backoff = Duration::from_millis(250);
    loop {
        match connect(target).await {
            Err(e)
                if e.kind() == io::ErrorKind::ConnectionAborted
                    && started.elapsed() < OPEN_RETRY =>
            {
                eprintln!(
                    "rowid-cdc: {e}; trying again in {:.2} s",
                    backoff.as_secs_f64()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// Whether a failure to get or create the stream is one a retry can cure: no answer in time,
/// JetStream not answering, or its cluster temporarily unavailable (error 10008).
fn transient(e: &async_nats::jetstream::context::CreateStreamError) -> bool {
    use async_nats::jetstream::context::CreateStreamErrorKind as K;
    match e.kind() {
        K::TimedOut | K::JetStreamUnavailable | K::Response => true,
        K::JetStream(js) => {
            js.error_code() == async_nats::jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE
        }
        _ => false,
    }
}

/// Connects to the servers, gets or creates the stream and checks it, and reads the slot's
/// last marker.
async fn connect(target: &NatsTarget) -> io::Result<Connected> {
    let name = &target.stream;
    let described = describe_urls(&target.urls);
    let urls: Vec<&str> = described.split(',').collect();
    let auth = &target.auth;
    let mut options = match &auth.creds {
        Some(path) => async_nats::ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|e| {
                io::Error::other(format!(
                    "NATS credentials file {}: cannot be read: {e}",
                    path.display()
                ))
            })?,
        None => async_nats::ConnectOptions::new(),
    };
    if let Some(token) = &auth.token {
        options = options.token(token.clone());
    }
    if let Some((user, password)) = &auth.user {
        options = options.user_and_password(user.clone(), password.clone());
    } else if auth.token.is_none() {
        match url_credentials(&target.urls) {
            Some((user, Some(password))) => options = options.user_and_password(user, password),
            Some((token, None)) => options = options.token(token),
            None => {}
        }
    }
    if let Some(ca) = &auth.tls_ca {
        options = options.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &auth.tls_cert {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    let tls = auth.tls || auth.tls_ca.is_some() || auth.tls_cert.is_some();
    let client = options
        .name("rowid-cdc")
        .require_tls(tls)
        .connect(urls.as_slice())
        .await
        .map_err(|e| {
            // Refused credentials or TLS settings are not cured by trying again.
            use async_nats::ConnectErrorKind as K;
            let text = hide_secrets(&e.to_string(), target);
            match e.kind() {
                K::Authentication | K::AuthorizationViolation | K::Tls | K::ServerParse => {
                    io::Error::other(format!("NATS {described}: {text}"))
                }
                // A certificate the roots do not verify arrives as an I/O error.
                K::Io if text.contains("invalid peer certificate") => {
                    io::Error::other(format!("NATS {described}: {text}"))
                }
                _ => lost(name, format!("cannot connect to {described}: {text}")),
            }
        })?;
    let max_payload = client.server_info().max_payload;
    let js = async_nats::jetstream::new(client);
    let filter = subject::stream_filter(&target.prefix);
    let mut stream = js
        .get_or_create_stream(Config {
            name: name.clone(),
            subjects: vec![filter.clone()],
            num_replicas: target.replicas,
            duplicate_window: DUPLICATE_WINDOW,
            storage: StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| match transient(&e) {
            true => lost(name, format!("cannot get or create it: {e}")),
            false => io::Error::other(format!("NATS stream {name}: cannot create it: {e}")),
        })?;
    let config = stream.cached_info().config.clone();
    if !config.subjects.iter().any(|s| *s == filter || s == ">") {
        return Err(io::Error::other(format!(
            "NATS stream {name} holds subjects {:?}, not {filter}: the changes would not be \
             kept; give it {filter} (or another --nats-subject-prefix, or another stream)",
            config.subjects
        )));
    }
    if config.retention != RetentionPolicy::Limits {
        eprintln!(
            "rowid-cdc: warning: NATS stream {name} has retention {:?}: messages are removed \
             once consumed, not kept as a log",
            config.retention
        );
    }
    if config.max_messages > 0 || config.max_bytes > 0 || config.max_age > Duration::ZERO {
        let what = match config.discard {
            DiscardPolicy::New => "once full it refuses new messages (the run stops there)",
            _ => "its oldest messages are removed past them",
        };
        eprintln!(
            "rowid-cdc: warning: NATS stream {name} has limits (max messages {}, max bytes {}, \
             max age {:?}): {what}",
            config.max_messages, config.max_bytes, config.max_age
        );
    }
    let markers = subject::marker_subject(&target.prefix, &target.slot);
    let last = match stream.get_last_raw_message_by_subject(&markers).await {
        Ok(m) => {
            let read = subject::read_marker(&m.payload).ok_or_else(|| {
                io::Error::other(format!(
                    "NATS stream {name}: the last message on {markers} (sequence {}) is not a \
                     marker of rowid-cdc",
                    m.sequence
                ))
            })?;
            Some((read, m.sequence))
        }
        Err(e)
            if matches!(
                e.kind(),
                async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound
            ) =>
        {
            None
        }
        Err(e) => return Err(lost(name, format!("cannot read {markers}: {e}"))),
    };
    let Some((marker, sequence)) = last else {
        return Ok(Connected {
            js,
            last: None,
            held: None,
            max_payload,
        });
    };
    if target.fresh {
        return Err(io::Error::other(format!(
            "NATS stream {name} already holds changes of slot {:?} (its markers on {markers}), \
             but there is no state file: they are from another run. Use another slot name, or \
             purge them first (nats stream purge {name} --subject '{markers}' and the changes \
             after them)",
            target.slot
        )));
    }
    // An unfinished transaction is sent again: what of it the stream holds is read here and
    // not published twice, whatever the de-duplication window (a resend can come later than
    // the window after the first publication: the server's clock, a large transaction).
    let held = match marker.marker {
        Marker::Open => Some(held_changes(target, &mut stream, sequence, marker.commit_lsn).await?),
        Marker::Commit => None,
    };
    Ok(Connected {
        js,
        last: Some(marker),
        held,
        max_payload,
    })
}

/// The changes of the unfinished transaction committing at `commit_lsn` that the stream holds
/// after its `open` marker (at `marker_sequence`): their sequences in the transaction, read by
/// their message ids with an ordered consumer (headers only) from the marker on.
async fn held_changes(
    target: &NatsTarget,
    stream: &mut async_nats::jetstream::stream::Stream,
    marker_sequence: u64,
    commit_lsn: Lsn,
) -> io::Result<Held> {
    use async_nats::jetstream::consumer::DeliverPolicy;
    use async_nats::jetstream::consumer::pull::OrderedConfig;
    use futures_util::StreamExt;

    let name = &target.stream;
    let failed = |what: &str, e: &dyn std::fmt::Display| lost(name, format!("{what}: {e}"));
    let last = stream
        .info()
        .await
        .map_err(|e| failed("cannot read the stream's state", &e))?
        .state
        .last_sequence;
    let mut changes = std::collections::HashSet::new();
    if last > marker_sequence {
        // `<slot>:<commit LSN>:` of the transaction's change ids.
        let first = subject::change_id(&target.slot, commit_lsn, 0);
        let prefix = &first[..first.len() - 1];
        let consumer = stream
            .create_consumer(OrderedConfig {
                filter_subject: subject::stream_filter(&target.prefix),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: marker_sequence + 1,
                },
                headers_only: true,
                ..Default::default()
            })
            .await
            .map_err(|e| failed("cannot read the messages after the open marker", &e))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| failed("cannot read the messages after the open marker", &e))?;
        loop {
            let message = tokio::time::timeout(ACK_TIMEOUT, messages.next())
                .await
                .map_err(|_| lost(name, "no message after the open marker within 10 s"))?;
            let Some(message) = message else { break };
            let message = message
                .map_err(|e| failed("cannot read the messages after the open marker", &e))?;
            let info = message
                .info()
                .map_err(|e| failed("a message without its stream sequence", &e))?;
            let (at, pending) = (info.stream_sequence, info.pending);
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.as_str().to_string());
            if let Some(seq) = id
                .as_deref()
                .and_then(|id| id.strip_prefix(prefix))
                .and_then(|n| n.parse::<u64>().ok())
            {
                changes.insert(seq);
            }
            if at >= last || pending == 0 {
                break;
            }
        }
    }
    Ok(Held {
        commit_lsn,
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sink's task, waiting on an empty channel, ends once the stream's end is dropped:
    /// the drop must close the channel before it wakes the task, or the task can look in the
    /// gap, find the channel empty and open, and wait forever (a clean stop then hangs joining
    /// the sink's thread). The gap is narrow, so the drop is raced many times.
    #[test]
    fn the_task_ends_when_the_stream_drops_its_end() {
        for round in 0..2000 {
            let (outbox, inbox) = channel();
            let (waiting, is_waiting) = sync_channel::<()>(1);
            let (ended, has_ended) = sync_channel::<Option<Cmd>>(1);
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let _ = waiting.send(());
                let _ = ended.send(runtime.block_on(inbox.next()));
            });
            is_waiting.recv().unwrap();
            if round % 2 == 0 {
                std::thread::yield_now();
            }
            drop(outbox);
            let next = has_ended.recv_timeout(Duration::from_secs(5));
            assert!(
                matches!(next, Ok(None)),
                "round {round}: the task still waits on a closed channel"
            );
        }
    }

    /// Credentials in a URL are found and decoded, and gone from what messages show; secrets
    /// in a library's message are hidden.
    #[test]
    fn urls_give_their_credentials_and_messages_drop_them() {
        let urls = "nats://a:4222, nats://cdc:p%40ss@b:4222";
        assert_eq!(
            url_credentials(urls),
            Some(("cdc".into(), Some("p@ss".into())))
        );
        assert_eq!(
            url_credentials("tls://tok3n@c:4222"),
            Some(("tok3n".into(), None))
        );
        assert_eq!(url_credentials("nats://a:4222"), None);
        assert_eq!(describe_urls(urls), "nats://a:4222,nats://b:4222");
        let target = NatsTarget {
            urls: urls.into(),
            stream: "S".into(),
            replicas: 1,
            prefix: "p".into(),
            slot: "s".into(),
            database: "d".into(),
            fresh: false,
            auth: NatsAuth {
                token: Some("t0ken".into()),
                ..NatsAuth::default()
            },
            acks_pending: None,
        };
        assert_eq!(
            hide_secrets("failed for nats://cdc:p%40ss@b:4222 with t0ken", &target),
            "failed for nats://<hidden>@b:4222 with <hidden>"
        );
        let shown = format!("{target:?}");
        assert!(!shown.contains("t0ken"), "{shown}");
    }
}
