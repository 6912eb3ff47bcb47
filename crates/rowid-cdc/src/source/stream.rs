//! One replication session: pgoutput messages from the replication connection into the
//! pipeline, and its durable positions acknowledged back, until the session ends.

use std::time::{Duration, Instant};

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationEvent};
use rowid_pgoutput::{CommitInfo, Message};

use crate::config::Options;
use crate::error::{CdcError, setup};
use crate::lsn::Lsn;
use crate::pipeline::Pipeline;
use crate::progress::{ChunkProgress, Progress};
use crate::sink::Sink;
use crate::source::chunk_reader::ChunkReader;

/// What ended one replication session.
pub(crate) enum SessionEnd {
    /// Asked to stop (signal, `stop_after`, server's end of stream).
    Stopped,
    /// The connection dropped: reconnect.
    Lost(PgWireError),
    /// The sink's connection dropped: reconnect both.
    SinkLost(CdcError),
}

/// How long after a chunk read that found the table in another shape than the stream it is
/// asked for again.
const STALE_RETRY: Duration = Duration::from_millis(100);

/// How many such reads in a row stop the run (about a minute: a shape that never agrees is a
/// defect to report, not to wait for).
const STALE_READS_LIMIT: u32 = 600;

/// The longest wait between reads of a chunk whose snapshot did not see a transaction the
/// stream delivered (a commit waiting for a synchronous standby: as long as it waits, the
/// stream goes on and the chunk is read again, the wait doubling from [`STALE_RETRY`]).
const UNSEEN_RETRY_MAX: Duration = Duration::from_secs(5);

/// How often a position reported with nothing in flight is recorded (each record is a state
/// file write and fsync).
const IDLE_RECORD_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) async fn stream(
    repl: &mut ReplicationClient,
    pipe: &mut Pipeline<Box<dyn Sink>>,
    opts: &Options,
    progress: &mut Progress,
    chunks: &mut Option<ChunkReader>,
) -> Result<SessionEnd, CdcError> {
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    // Transactions may share a commit of the sink; the group is committed as soon as the
    // stream has nothing more ready (below), so grouping adds no wait.
    pipe.group_commits(true);
    let mut last_idle_record = Instant::now() - IDLE_RECORD_INTERVAL;
    // A coverage message ([`rowid_registry::buffer::COVERAGE_PREFIX`]) arrived and is not
    // recorded yet: its position is recorded at once, whatever the interval, and given to
    // the sink as its coverage ([`Pipeline::covered_at`]).
    let mut coverage_asked = false;
    let mut chunk_progress = ChunkProgress::new(opts.progress);
    // A chunk read found the table in another shape than the stream: when to ask again, and
    // how many times in a row that happened.
    let mut retry_at: Option<Instant> = None;
    let mut stale_reads = 0u32;
    // A chunk whose snapshot did not see a transaction the stream delivered: the wait before
    // it is read again, and the transaction last reported.
    let mut unseen_wait = STALE_RETRY;
    let mut unseen_reported: Option<u32> = None;
    loop {
        // Between transactions, with no chunk waiting for its watermark: the next chunk of a
        // table being snapshotted (read while the stream waits: at most one chunk's rows).
        let retry_due = retry_at.is_none_or(|at| Instant::now() >= at);
        if let Some(request) = retry_due.then(|| pipe.chunk_request()).flatten() {
            let reader = match chunks {
                Some(reader) => reader,
                None => {
                    chunks.insert(ChunkReader::connect(opts, pipe.state().identity_table).await?)
                }
            };
            crate::fault::at(crate::fault::Point::BeforeChunkRead);
            let Some(read) = reader.read(&request).await? else {
                // The table's shape under a new snapshot is not the stream's yet: asked again
                // shortly (the stream reaches the DDL, or the DDL becomes visible).
                stale_reads += 1;
                if stale_reads > STALE_READS_LIMIT {
                    return Err(setup(format!(
                        "snapshot chunks: {}.{}: for {STALE_READS_LIMIT} reads its shape under \
                         the read's snapshot was not the one the stream stands at",
                        request.namespace, request.relname
                    )));
                }
                retry_at = Some(Instant::now() + STALE_RETRY);
                continue;
            };
            stale_reads = 0;
            retry_at = None;
            let rows = read.rows.len();
            if let Some(unseen) = pipe
                .open_chunk(&request, read)
                .map_err(CdcError::Pipeline)?
            {
                // Read again later; the stream goes on meanwhile.
                if unseen_reported != Some(unseen.xid) {
                    eprintln!(
                        "rowid-cdc: notice: snapshot chunks: {}.{}: transaction {} was \
                         delivered by the stream but is not visible to new snapshots yet (a \
                         commit waiting for a synchronous standby?); the chunk is read again \
                         once it is",
                        request.namespace, request.relname, unseen.xid
                    );
                    unseen_reported = Some(unseen.xid);
                }
                retry_at = Some(Instant::now() + unseen_wait);
                unseen_wait = (unseen_wait * 2).min(UNSEEN_RETRY_MAX);
                continue;
            }
            unseen_wait = STALE_RETRY;
            chunk_progress.chunk(
                request.relid,
                &format!("{}.{}", request.namespace, request.relname),
                rows,
                reader.estimate(request.relid),
                pipe.chunk_tables(),
            );
        }
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        // A group of transactions waiting in the sink is committed when no message is ready
        // (the branches are polled in order: a ready message comes first).
        let flush_due = pipe.has_staged() && !pipe.in_transaction();
        let event = tokio::select! {
            biased;
            _ = &mut stop => {
                stopping(repl, pipe)?;
                return Ok(SessionEnd::Stopped);
            }
            e = repl.recv() => e,
            () = std::future::ready(()), if flush_due => {
                if let Some(lsn) = pipe.flush().map_err(CdcError::Pipeline)? {
                    repl.update_applied_lsn(pgwire_replication::Lsn::from_u64(lsn.0));
                    progress.server_end = progress.server_end.max(lsn.0);
                    pipe.server_reported(lsn);
                }
                continue;
            }
            () = retry => continue,
        };
        let ev = match event {
            Ok(Some(ev)) => ev,
            Ok(None) => {
                pipe.flush().map_err(CdcError::Pipeline)?;
                return Ok(SessionEnd::Stopped);
            }
            Err(e) => return Ok(SessionEnd::Lost(e)),
        };
        // A position the server reported while no transaction is open: recorded (and then
        // acknowledged) at most once a second.
        let mut idle = None;
        let ack = match ev {
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => pipe.apply(
                Lsn(final_lsn.as_u64()),
                Message::Begin {
                    final_lsn: final_lsn.as_u64(),
                    commit_ts: commit_time_micros,
                    xid,
                },
            ),
            ReplicationEvent::XLogData {
                wal_start, data, ..
            } => pipe.message(Lsn(wal_start.as_u64()), data),
            ReplicationEvent::Commit {
                lsn,
                end_lsn,
                commit_time_micros,
            } => pipe.apply(
                Lsn(lsn.as_u64()),
                Message::Commit(CommitInfo {
                    flags: 0,
                    commit_lsn: lsn.as_u64(),
                    end_lsn: end_lsn.as_u64(),
                    commit_ts: commit_time_micros,
                }),
            ),
            ReplicationEvent::Message {
                transactional,
                lsn,
                prefix,
                content,
            } => {
                if !transactional {
                    idle = Some(Lsn(lsn.as_u64()));
                    // A stream table's refresh waits for this one to be recorded.
                    coverage_asked |= prefix == rowid_registry::buffer::COVERAGE_PREFIX;
                }
                pipe.apply(
                    Lsn(lsn.as_u64()),
                    Message::Message {
                        xid: None,
                        transactional,
                        lsn: lsn.as_u64(),
                        prefix,
                        content,
                    },
                )
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                progress.server_end = progress.server_end.max(wal_end.as_u64());
                pipe.server_reported(Lsn(wal_end.as_u64()));
                idle = Some(Lsn(wal_end.as_u64()));
                Ok(None)
            }
            ReplicationEvent::StoppedAt { .. } => {
                pipe.flush().map_err(CdcError::Pipeline)?;
                return Ok(SessionEnd::Stopped);
            }
        }
        .map_err(CdcError::Pipeline)?;
        for notice in pipe.take_notices() {
            eprintln!("rowid-cdc: notice: {notice}");
        }
        let ack = match (ack, idle) {
            (Some(lsn), _) => Some(lsn),
            (None, Some(lsn)) if coverage_asked && !pipe.in_transaction() => {
                let recorded = pipe.covered_at(lsn).map_err(CdcError::Pipeline)?;
                coverage_asked = false;
                if recorded.is_some() {
                    last_idle_record = Instant::now();
                }
                recorded
            }
            (None, Some(lsn)) if last_idle_record.elapsed() >= IDLE_RECORD_INTERVAL => {
                let recorded = pipe.idle_at(lsn).map_err(CdcError::Pipeline)?;
                if recorded.is_some() {
                    last_idle_record = Instant::now();
                }
                recorded
            }
            (None, _) => None,
        };
        if let Some(lsn) = ack {
            repl.update_applied_lsn(pgwire_replication::Lsn::from_u64(lsn.0));
            progress.server_end = progress.server_end.max(lsn.0);
            pipe.server_reported(lsn);
        }
        progress.line(pipe.progress(), false);
        if chunk_progress.waiting() {
            chunk_progress.tables(pipe.chunk_tables());
        }
        if opts
            .stop_after
            .is_some_and(|n| pipe.progress().changes >= n && !pipe.in_transaction())
        {
            stopping(repl, pipe)?;
            return Ok(SessionEnd::Stopped);
        }
    }
}

/// Before the session stops: the transactions waiting in the sink made durable and
/// acknowledged, then the stream stopped.
fn stopping(
    repl: &mut ReplicationClient,
    pipe: &mut Pipeline<Box<dyn Sink>>,
) -> Result<(), CdcError> {
    if let Some(lsn) = pipe.flush().map_err(CdcError::Pipeline)? {
        repl.update_applied_lsn(pgwire_replication::Lsn::from_u64(lsn.0));
    }
    repl.stop();
    Ok(())
}
