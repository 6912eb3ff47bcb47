//! Following a slot, the command's main loop. The data flow:
//!
//! ```text
//! source::start ──checks──▶ slot (created at a consistent point, schemas read there)
//!                                    │
//! source::stream ──pgoutput──▶ Pipeline (capture ─▶ sink ─▶ state file) ──▶ ack
//!        ▲                                                                     │
//!        └──────────────── standby status: the durable position ◀──────────────┘
//! ```
//!
//! Invariants: nothing is acknowledged that the sink has not made durable and the state file
//! does not hold; a position reported with nothing in flight is acknowledged too, so an idle
//! slot never pins WAL; a lost connection (either one) resumes at the last durable position,
//! with the sink reopened at it. This module holds only the loop and its retry decisions:
//! the start in [`crate::source::start`], one session in [`crate::source::stream`].

use std::time::Duration;

use pgwire_replication::{PgWireError, ReplicationClient};

use crate::config::Options;
use crate::counters::SharedCounters;
use crate::error::CdcError;
use crate::metrics;
use crate::pipeline::{Pipeline, PipelineError};
use crate::progress::Progress;
use crate::sink;
use crate::source::start::{self, Started};
use crate::source::stream::{self, SessionEnd};
use crate::source::{heartbeat, replication};

/// Follows the slot until asked to stop or an error that retrying cannot fix.
pub async fn run(opts: Options) -> Result<(), CdcError> {
    let counters = match opts.metrics {
        Some(addr) => {
            let counters = SharedCounters::new();
            let bound = metrics::serve(addr, counters.clone())?;
            eprintln!("rowid-cdc: metrics at http://{bound}/metrics");
            Some(counters)
        }
        None => None,
    };
    let started = start::start(&opts, counters.as_ref()).await?;
    follow(&opts, started, counters).await
}

/// The replication stream into the pipeline, reconnecting when a connection is lost.
async fn follow(
    opts: &Options,
    started: Started,
    counters: Option<SharedCounters>,
) -> Result<(), CdcError> {
    let Started {
        mut gated,
        mut pipe,
        ignored,
        source_database,
        seen,
    } = started;

    let _heartbeat = opts
        .heartbeat
        .map(|every| heartbeat::spawn(opts.dsn.clone(), every));
    let mut backoff = Duration::from_millis(250);
    let mut progress = Progress::new(opts.progress);
    // The snapshot chunks' SQL connection, opened when a chunk is first needed.
    let mut chunks = None;
    loop {
        let start = pipe.state().end_lsn;
        let repl = match gated.take() {
            Some(r) => Ok(r),
            None => {
                ReplicationClient::connect_gated(replication::config(opts, &seen, start)?).await
            }
        };
        let end = match repl {
            Ok(mut repl) => match repl.start().await {
                Ok(()) => {
                    backoff = Duration::from_millis(250);
                    match stream::stream(&mut repl, &mut pipe, opts, &mut progress, &mut chunks)
                        .await
                    {
                        Ok(end) => end,
                        Err(e) if sink_transient(&e) => SessionEnd::SinkLost(e),
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => SessionEnd::Lost(e),
            },
            Err(e) => SessionEnd::Lost(e),
        };
        match end {
            SessionEnd::Stopped => {
                progress.line(pipe.progress(), true);
                return Ok(());
            }
            SessionEnd::Lost(e) if !retryable(&e) => return Err(CdcError::Replication(e)),
            lost => {
                let what = match lost {
                    SessionEnd::Lost(e) => format!("replication connection lost ({e})"),
                    SessionEnd::SinkLost(e) => format!("{e}"),
                    SessionEnd::Stopped => String::new(),
                };
                // Resume exactly at the last durable transaction: the sink is reopened at
                // it (a file is cut to it, a buffer reports what it holds) and the capture
                // forgets the unfinished transaction.
                let state = pipe.state().clone();
                drop(pipe);
                if let Some(counters) = &counters {
                    counters.reconnected();
                }
                let mut what = what;
                pipe = loop {
                    eprintln!(
                        "rowid-cdc: {what}; reconnecting in {:.1} s from {}",
                        backoff.as_secs_f64(),
                        state.end_lsn
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    match sink::factory::open(
                        opts,
                        Some(&state),
                        source_database.as_deref(),
                        counters.as_ref(),
                    ) {
                        Ok(sink) => {
                            let mut pipe = Pipeline::resume(
                                state.clone(),
                                sink,
                                Some(opts.state.clone()),
                                opts.strictness(),
                                &ignored,
                            )
                            .map_err(CdcError::Pipeline)?;
                            if let Some(counters) = &counters {
                                pipe.report_to(counters.clone());
                            }
                            break pipe;
                        }
                        Err(e) if sink_transient(&e) => what = e.to_string(),
                        Err(e) => return Err(e),
                    }
                };
            }
        }
    }
}

/// A sink failure a reconnection can cure (its server restarting, the connection lost).
fn sink_transient(e: &CdcError) -> bool {
    match e {
        CdcError::Sink(e) | CdcError::Pipeline(PipelineError::Sink(e)) => {
            e.kind() == std::io::ErrorKind::ConnectionAborted
        }
        _ => false,
    }
}

/// Connection-level failures are retried; what the server refused is not.
fn retryable(e: &PgWireError) -> bool {
    match e {
        PgWireError::Io(_) | PgWireError::Task(_) => true,
        // The server shutting down or restarting ends the session with an error message;
        // after a lost connection, the slot can still be held by the server process of the
        // lost session until it notices (55006, object in use).
        PgWireError::Server(m) => {
            m.contains("57P01")
                || m.contains("terminating connection")
                || m.contains("57P03")
                || m.contains("55006")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a reconnection retries: the connection lost, the server restarting, the slot still
    /// held by the lost session's server process; not what the server refused.
    #[test]
    fn what_a_reconnection_retries() {
        let server = |m: &str| PgWireError::Server(m.to_string());
        assert!(retryable(&server(
            "ERROR: replication slot \"s\" is active for PID 4242 (SQLSTATE 55006)"
        )));
        assert!(retryable(&server(
            "FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"
        )));
        assert!(retryable(&server(
            "FATAL: the database system is shutting down (SQLSTATE 57P03)"
        )));
        assert!(!retryable(&server(
            "ERROR: replication slot \"s\" does not exist (SQLSTATE 42704)"
        )));
        assert!(!retryable(&server(
            "FATAL: password authentication failed for user \"u\" (SQLSTATE 28P01)"
        )));
    }
}
