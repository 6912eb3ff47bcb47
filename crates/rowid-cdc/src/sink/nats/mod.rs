//! The NATS JetStream sink (`--sink nats:URL`): every change as its JSON line into a
//! JetStream stream, exactly once, on subject `PREFIX.<database>.<schema>.<table>`, with
//! headers naming the relation, the operation, the commit LSN and the identity
//! (spec/nats.md).
//!
//! Data flow: [`NatsSink`] (the [`Sink`] the pipeline calls, on the stream's thread) writes
//! each event's JSON line and headers and sends it through a bounded channel to the sink's
//! thread, which publishes it with `async-nats` (its connection on a one-worker runtime of its
//! own) and keeps the acknowledgement's future; at the transaction's commit it publishes the
//! slot's commit marker and waits for every acknowledgement of the transaction. Publishing is
//! pipelined: no message waits for the one before it to be acknowledged.
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

use std::io;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::stream::{Config, DiscardPolicy, RetentionPolicy, StorageType};
use bytes::Bytes;

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
    /// Every publication so far acknowledged: answer on the reply channel.
    Flush,
}

/// The NATS JetStream sink.
#[derive(Debug)]
pub struct NatsSink {
    target: NatsTarget,
    cmds: Option<SyncSender<Cmd>>,
    replies: Receiver<io::Result<()>>,
    thread: Option<JoinHandle<()>>,
    /// The last transaction the stream held whole when the sink was opened.
    delivered: Option<Lsn>,
    /// The last transaction committed through this sink (or `delivered`).
    last_commit: Option<Lsn>,
    /// The open transaction: its commit LSN and the changes sent of it.
    open: Option<(Lsn, u64)>,
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
        let (cmds, from_sink) = sync_channel::<Cmd>(CHANNEL_MESSAGES);
        let (to_sink, replies) = sync_channel::<io::Result<()>>(1);
        let (opened, on_open) = sync_channel::<io::Result<Option<ReadMarker>>>(1);
        let for_thread = target.clone();
        let thread = std::thread::Builder::new()
            .name("nats-sink".into())
            .spawn(move || serve(for_thread, from_sink, to_sink, opened))?;
        let last = on_open
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
            line: String::new(),
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

    fn marker(&self, marker: Marker, commit_lsn: Lsn, changes: u64) -> io::Result<()> {
        let t = &self.target;
        self.send(Cmd::Publish {
            subject: subject::marker_subject(&t.prefix, &t.slot),
            id: subject::marker_id(&t.slot, commit_lsn, marker),
            headers: Vec::new(),
            body: Bytes::from(subject::marker_body(
                marker,
                commit_lsn,
                self.last_commit,
                changes,
            )),
        })
    }
}

impl Sink for NatsSink {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        let seq = match self.open {
            Some((lsn, n)) if lsn == event.commit_lsn => n,
            _ => {
                self.marker(Marker::Open, event.commit_lsn, 0)?;
                0
            }
        };
        self.open = Some((event.commit_lsn, seq + 1));
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
            return Ok(Durable::default());
        };
        self.marker(Marker::Commit, lsn, changes)?;
        self.send(Cmd::Flush)?;
        match self.replies.recv() {
            Ok(Ok(())) => {
                self.last_commit = Some(lsn);
                Ok(Durable::default())
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(self.lost()),
        }
    }

    fn durable(&self) -> Durable {
        Durable::default()
    }

    fn delivered(&self) -> Option<Lsn> {
        self.delivered
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

/// The sink's thread: connects and checks (the answer on `opened`), then publishes what the
/// stream's thread sends until the channel closes.
fn serve(
    target: NatsTarget,
    cmds: Receiver<Cmd>,
    replies: SyncSender<io::Result<()>>,
    opened: SyncSender<io::Result<Option<ReadMarker>>>,
) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = opened.send(Err(e));
            return;
        }
    };
    let js = match runtime.block_on(connect(&target)) {
        Ok((js, last)) => {
            let _ = opened.send(Ok(last));
            js
        }
        Err(e) => {
            let _ = opened.send(Err(e));
            return;
        }
    };
    let mut pending: std::collections::VecDeque<PublishAckFuture> =
        std::collections::VecDeque::new();
    let ack = |f: PublishAckFuture| -> io::Result<()> {
        runtime
            .block_on(async { tokio::time::timeout(ACK_TIMEOUT, f).await })
            .map_err(|_| lost(&target.stream, "no acknowledgement within 10 s"))?
            .map(|_| ())
            .map_err(|e| lost(&target.stream, format!("publish not acknowledged: {e}")))
    };
    while let Ok(cmd) = cmds.recv() {
        let result = match cmd {
            Cmd::Publish {
                subject,
                id,
                headers,
                body,
            } => {
                let mut map = async_nats::HeaderMap::new();
                map.insert("Nats-Msg-Id", id.as_str());
                for (name, value) in &headers {
                    map.insert(*name, value.as_str());
                }
                match runtime.block_on(js.publish_with_headers(subject, map, body)) {
                    Ok(f) => {
                        pending.push_back(f);
                        match pending.len() > PENDING_ACKS {
                            true => pending.pop_front().map_or(Ok(()), &ack),
                            false => Ok(()),
                        }
                    }
                    Err(e) => Err(lost(&target.stream, format!("publish failed: {e}"))),
                }
            }
            Cmd::Flush => {
                let all = pending.drain(..).try_for_each(&ack);
                let answer = all.as_ref().map(|_| ()).map_err(clone_error);
                if replies.send(answer).is_err() {
                    return;
                }
                all
            }
        };
        if let Err(e) = result {
            // The stream's thread learns it at its next send or commit.
            let _ = replies.try_send(Err(e));
            return;
        }
    }
}

fn clone_error(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

/// Connects to the servers, gets or creates the stream and checks it, and reads the slot's
/// last marker.
async fn connect(
    target: &NatsTarget,
) -> io::Result<(async_nats::jetstream::Context, Option<ReadMarker>)> {
    let name = &target.stream;
    let urls: Vec<&str> = target.urls.split(',').map(str::trim).collect();
    let client = async_nats::ConnectOptions::new()
        .name("rowid-cdc")
        .connect(urls.as_slice())
        .await
        .map_err(|e| lost(name, format!("cannot connect to {}: {e}", target.urls)))?;
    let js = async_nats::jetstream::new(client);
    let filter = subject::stream_filter(&target.prefix);
    let stream = js
        .get_or_create_stream(Config {
            name: name.clone(),
            subjects: vec![filter.clone()],
            num_replicas: target.replicas,
            duplicate_window: DUPLICATE_WINDOW,
            storage: StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| io::Error::other(format!("NATS stream {name}: cannot create it: {e}")))?;
    let config = &stream.cached_info().config;
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
    let window = config.duplicate_window;
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
            Some((read, m.sequence, m.time.unix_timestamp()))
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
    let Some((marker, sequence, published)) = last else {
        return Ok((js, None));
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let age = Duration::from_secs(now.saturating_sub(published).max(0) as u64);
    // Half the window: the resend itself takes time, and the server forgets an id a window
    // after its first publication.
    if marker.marker == Marker::Open && age.saturating_mul(2) >= window {
        return Err(io::Error::other(format!(
            "NATS stream {name}: slot {:?} left transaction {} unfinished (its open marker, \
             sequence {sequence}, is {} s old), more than half the stream's de-duplication \
             window ({} s) ago: its changes sent again might not be recognised as duplicates. \
             Remove the messages after sequence {sequence} of this slot, or widen the window \
             (duplicate_window), then restart",
            target.slot,
            marker.commit_lsn,
            age.as_secs(),
            window.as_secs()
        )));
    }
    Ok((js, Some(marker)))
}
