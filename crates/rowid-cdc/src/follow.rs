//! Following a slot, the command's main loop. The data flow:
//!
//! ```text
//! SQL connection ──checks──▶ slot (created at a consistent point, schemas read there)
//!                                    │
//! replication connection ──pgoutput──▶ Pipeline (capture ─▶ sink ─▶ state file) ──▶ ack
//!        ▲                                                                          │
//!        └────────────────── standby status: the durable position ◀─────────────────┘
//! ```
//!
//! Invariants: nothing is acknowledged that the sink has not made durable and the state file
//! does not hold; a position reported with nothing in flight is acknowledged too, so an idle
//! slot never pins WAL; a lost connection (either one) resumes at the last durable position.
//! The checks are in [`crate::checks`], the slot in [`crate::slot`], the connections in
//! [`crate::net`] and [`crate::replication`], the progress line in [`crate::progress`].

use std::collections::BTreeSet;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationEvent};
use rowid_pgoutput::{CommitInfo, FlagBits, Message};
use rowid_registry::schema_message::RelationSchema;
use rowid_registry::sql::QualifiedName;
use tokio_postgres::Client;

use crate::capture::Capture;
pub use crate::cdc_error::CdcError;
use crate::cdc_error::setup;
use crate::conninfo::Conninfo;
use crate::lsn::Lsn;
use crate::net::{self, Session};
use crate::pg_sink::{PostgresSink, Target};
use crate::pipeline::{Pipeline, PipelineError};
use crate::progress::Progress;
use crate::sink::{JsonlFile, JsonlStdout, Null, Sink};
use crate::state::State;
use crate::{checks, heartbeat, replication, slot};

/// Where events go.
#[derive(Clone, Debug)]
pub enum SinkSpec {
    /// JSON lines on standard output.
    Stdout,
    /// JSON lines appended to a file, fsynced at each commit.
    File(PathBuf),
    /// Counted and dropped (benchmarks).
    Null,
    /// Change rows into a PostgreSQL change buffer (`None`: the source's database).
    Postgres {
        /// The sink's database.
        dsn: Option<Box<Conninfo>>,
        /// The buffer.
        buffer: QualifiedName,
    },
}

/// What to follow and where to write.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server.
    pub dsn: Conninfo,
    /// The logical replication slot.
    pub slot: String,
    /// The publication.
    pub publication: String,
    /// Create the slot when there is no state file.
    pub create_slot: bool,
    /// The state file.
    pub state: PathBuf,
    /// The sink.
    pub sink: SinkSpec,
    /// Print a progress line on stderr, at most once a second.
    pub progress: bool,
    /// Stop once this many changes were delivered (tests, benchmarks).
    pub stop_after: Option<u64>,
    /// Refuse to start when a published table cannot give every change an identity, and
    /// stop at a change without one, instead of emitting it unidentified.
    pub strict: bool,
    /// Write a heartbeat into the database this often (for a database that is itself idle).
    pub heartbeat: Option<Duration>,
}

/// The SQL connection of the checks, with a locked search path.
async fn connect_sql(dsn: &Conninfo) -> Result<(Client, Session), CdcError> {
    let connected = net::connect(dsn).await.map_err(|e| setup(e.message))?;
    tokio::spawn(async move {
        let _ = connected.connection.await;
    });
    connected
        .client
        .batch_execute("SET search_path = pg_catalog, pg_temp")
        .await?;
    Ok((connected.client, connected.session))
}

/// Names the published tables some of whose changes will have no identity (but those in
/// `ignored`, the sink's own): a refusal under `--strict`, a warning otherwise.
fn report(
    schemas: &[RelationSchema],
    ignored: &BTreeSet<u32>,
    strict: bool,
) -> Result<(), CdcError> {
    let captured: Vec<RelationSchema> = schemas
        .iter()
        .filter(|s| !ignored.contains(&s.relid))
        .cloned()
        .collect();
    let problems = checks::unidentified(&captured);
    if problems.is_empty() {
        return Ok(());
    }
    let list = problems.join("\n  ");
    if strict {
        return Err(setup(format!(
            "--strict: published tables whose changes would have no identity:\n  {list}"
        )));
    }
    eprintln!(
        "rowid-cdc: warning: published tables some of whose changes will be unidentified \
         events (\"op\":\"unidentified\"; --strict refuses to start):\n  {list}"
    );
    Ok(())
}

/// Opens the sink. `state`: the state file's record (`None`: there is none yet, so the sink
/// must hold nothing).
fn open_sink(opts: &Options, state: Option<&State>) -> Result<Box<dyn Sink>, CdcError> {
    Ok(match &opts.sink {
        SinkSpec::Stdout => Box::new(JsonlStdout::new()),
        SinkSpec::Null => Box::new(Null::default()),
        SinkSpec::File(path) => {
            Box::new(JsonlFile::open(path, state.and_then(|s| s.sink_len)).map_err(CdcError::Sink)?)
        }
        SinkSpec::Postgres { dsn, buffer } => Box::new(
            PostgresSink::open(Target {
                config: dsn.as_deref().unwrap_or(&opts.dsn).clone(),
                buffer: buffer.clone(),
                slot: opts.slot.clone(),
                fresh: state.is_none(),
            })
            .map_err(CdcError::Sink)?,
        ),
    })
}

/// The pipeline from `state` into `sink`; transactions the sink already holds beyond the
/// state are replayed without being written again.
fn pipeline(
    opts: &Options,
    state: State,
    sink: Box<dyn Sink>,
    ignored: &BTreeSet<u32>,
) -> Result<Pipeline<Box<dyn Sink>>, CdcError> {
    let capture = Capture::new(state.schemas.clone(), state.commit_lsn, FlagBits::default())
        .with_delivered(sink.delivered().unwrap_or(Lsn::ZERO))
        .with_identity_table(state.identity_table)
        .strict(opts.strict)
        .ignoring(ignored.iter().copied());
    Pipeline::new(capture, sink, state, Some(opts.state.clone())).map_err(CdcError::Pipeline)
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

/// What ended one replication session.
enum SessionEnd {
    /// Asked to stop (signal, `stop_after`, server's end of stream).
    Stopped,
    /// The connection dropped: reconnect.
    Lost(PgWireError),
    /// The sink's connection dropped: reconnect both.
    SinkLost(CdcError),
}

/// What the checks at start leave for following: where to resume, the sink, what not to
/// capture, how to reach the replication connection.
struct Started {
    /// The replication connection that created the slot (a new slot), not streaming yet.
    gated: Option<ReplicationClient>,
    state: State,
    sink: Box<dyn Sink>,
    /// The sink's own tables in the captured database.
    ignored: BTreeSet<u32>,
    /// What the SQL connection saw of the server (TLS, authentication, certificate).
    seen: Session,
}

/// Follows the slot until asked to stop or an error that retrying cannot fix.
pub async fn run(opts: Options) -> Result<(), CdcError> {
    let started = start(&opts).await?;
    follow(&opts, started).await
}

/// The replication connection's settings, resuming at `start`.
fn replication_config(
    opts: &Options,
    seen: &Session,
    start: Lsn,
) -> Result<pgwire_replication::ReplicationConfig, CdcError> {
    replication::config(&opts.dsn, seen, &opts.slot, &opts.publication)
        .map(|c| c.with_start_lsn(pgwire_replication::Lsn::from_u64(start.0)))
        .map_err(setup)
}

/// The checks at start, the state, the sink and (with `--create-slot`) the slot.
async fn start(opts: &Options) -> Result<Started, CdcError> {
    slot::check_name(&opts.slot)?;
    if opts.dsn.password_on_command_line() {
        eprintln!(
            "rowid-cdc: warning: the password is in --dsn, where other users of this machine \
             can read it (ps); use PGPASSWORD, ~/.pgpass or ROWID_CDC_DSN"
        );
    }
    let (mut client, seen) = connect_sql(&opts.dsn).await?;
    let identity_table = checks::server(&client, &opts.publication).await?;
    let saved = State::load(&opts.state).map_err(CdcError::State)?;
    if let Some(state) = &saved {
        if state.slot != opts.slot || state.publication != opts.publication {
            return Err(setup(format!(
                "{} belongs to slot {:?} and publication {:?}, not {:?} and {:?}",
                opts.state.display(),
                state.slot,
                state.publication,
                opts.slot,
                opts.publication
            )));
        }
        if state.identity_table != identity_table {
            return Err(setup(format!(
                "{} trusts the identity schema table with OID {}, but the extension's is now \
                 OID {identity_table} (the extension was dropped and created again): schema \
                 changes in between are unknown; start over with a new state file and \
                 --create-slot",
                opts.state.display(),
                state.identity_table
            )));
        }
    }
    let info = slot::info(&client, &opts.slot).await?;
    if let Some(pid) = info.as_ref().and_then(|s| s.active_pid) {
        return Err(setup(format!(
            "slot {:?} is in use by the process with PID {pid}",
            opts.slot
        )));
    }
    // The sink is opened (and checked) before a slot is created, so that a refused sink
    // leaves nothing behind.
    let sink = open_sink(opts, saved.as_ref())?;
    // A buffer in the database being captured is not captured itself: its writes would come
    // back through the slot forever.
    let source_database = net::database_id(&client).await;
    let ignored: BTreeSet<u32> = match (&opts.sink, sink.own_tables()) {
        (SinkSpec::Postgres { dsn, .. }, Some((database, tables)))
            if dsn.is_none() || (database.is_some() && database == source_database) =>
        {
            eprintln!(
                "rowid-cdc: the sink's own tables (OIDs {tables:?}) are in the captured database: \
                 their changes are not captured"
            );
            tables.into_iter().collect()
        }
        _ => BTreeSet::new(),
    };
    let (gated, state) = match (saved, info) {
        (Some(state), Some(info)) => {
            checks::slot_position(&opts.slot, info.confirmed, state.end_lsn)?;
            report(&state.schemas, &ignored, opts.strict)?;
            (None, state)
        }
        (Some(_), None) => {
            return Err(setup(format!(
                "slot {:?} named by {} does not exist (it was dropped?): the changes since the \
                 state's position are gone; start over with a new state file and --create-slot",
                opts.slot,
                opts.state.display()
            )));
        }
        (None, Some(info)) => {
            return Err(setup(format!(
                "slot {:?} exists (plugin {}) but {} does not: the identity schemas as of its \
                 position are unknown. Give the state file that followed it, or drop the slot \
                 and start with --create-slot",
                opts.slot,
                info.plugin.unwrap_or_default(),
                opts.state.display()
            )));
        }
        (None, None) if !opts.create_slot => {
            return Err(setup(format!(
                "slot {:?} does not exist: pass --create-slot to create it",
                opts.slot
            )));
        }
        (None, None) => {
            // Checked against the catalog as it is now, before anything is created: a refusal
            // leaves no slot behind.
            report(
                &checks::schemas(&client, &opts.publication).await?,
                &ignored,
                opts.strict,
            )?;
            let repl =
                ReplicationClient::connect_gated(replication_config(opts, &seen, Lsn::ZERO)?)
                    .await
                    .map_err(CdcError::Replication)?;
            let created = slot::create(repl, &mut client, &opts.slot, &opts.publication).await?;
            if let Err(e) = report(&created.schemas, &ignored, opts.strict) {
                drop(created.replication);
                slot::drop(&client, &opts.slot).await?;
                return Err(e);
            }
            let state = State {
                slot: opts.slot.clone(),
                publication: opts.publication.clone(),
                commit_lsn: Lsn::ZERO,
                end_lsn: created.consistent,
                identity_table,
                sink_len: None,
                schemas: created.schemas,
            };
            (Some(created.replication), state)
        }
    };
    drop(client);
    Ok(Started {
        gated,
        state,
        sink,
        ignored,
        seen,
    })
}

/// The replication stream into the pipeline, reconnecting when a connection is lost.
async fn follow(opts: &Options, started: Started) -> Result<(), CdcError> {
    let Started {
        mut gated,
        state,
        sink,
        ignored,
        seen,
    } = started;

    let _heartbeat = opts
        .heartbeat
        .map(|every| heartbeat::spawn(opts.dsn.clone(), every));
    let mut pipe = pipeline(opts, state, sink, &ignored)?;
    let mut backoff = Duration::from_millis(250);
    let mut progress = Progress::new(opts.progress);
    loop {
        let start = pipe.state().end_lsn;
        let repl = match gated.take() {
            Some(r) => Ok(r),
            None => ReplicationClient::connect_gated(replication_config(opts, &seen, start)?).await,
        };
        let end = match repl {
            Ok(mut repl) => match repl.start().await {
                Ok(()) => {
                    backoff = Duration::from_millis(250);
                    match stream(&mut repl, &mut pipe, opts, &mut progress).await {
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
                let mut what = what;
                pipe = loop {
                    eprintln!(
                        "rowid-cdc: {what}; reconnecting in {:.1} s from {}",
                        backoff.as_secs_f64(),
                        state.end_lsn
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    match open_sink(opts, Some(&state)) {
                        Ok(sink) => break pipeline(opts, state.clone(), sink, &ignored)?,
                        Err(e) if sink_transient(&e) => what = e.to_string(),
                        Err(e) => return Err(e),
                    }
                };
            }
        }
    }
}

/// Connection-level failures are retried; what the server refused is not.
fn retryable(e: &PgWireError) -> bool {
    match e {
        PgWireError::Io(_) | PgWireError::Task(_) => true,
        // The server shutting down or restarting ends the session with an error message.
        PgWireError::Server(m) => {
            m.contains("57P01") || m.contains("terminating connection") || m.contains("57P03")
        }
        _ => false,
    }
}

/// How often a position reported with nothing in flight is recorded (each record is a state
/// file write and fsync).
const IDLE_RECORD_INTERVAL: Duration = Duration::from_secs(1);

async fn stream(
    repl: &mut ReplicationClient,
    pipe: &mut Pipeline<Box<dyn Sink>>,
    opts: &Options,
    progress: &mut Progress,
) -> Result<SessionEnd, CdcError> {
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    let mut last_idle_record = Instant::now() - IDLE_RECORD_INTERVAL;
    loop {
        let event = tokio::select! {
            _ = &mut stop => {
                repl.stop();
                return Ok(SessionEnd::Stopped);
            }
            e = repl.recv() => e,
        };
        let ev = match event {
            Ok(Some(ev)) => ev,
            Ok(None) => return Ok(SessionEnd::Stopped),
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
                idle = Some(Lsn(wal_end.as_u64()));
                Ok(None)
            }
            ReplicationEvent::StoppedAt { .. } => return Ok(SessionEnd::Stopped),
        }
        .map_err(CdcError::Pipeline)?;
        for notice in pipe.take_notices() {
            eprintln!("rowid-cdc: notice: {notice}");
        }
        let ack = match (ack, idle) {
            (Some(lsn), _) => Some(lsn),
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
        }
        progress.line(pipe.progress(), false);
        if opts
            .stop_after
            .is_some_and(|n| pipe.progress().changes >= n && !pipe.in_transaction())
        {
            repl.stop();
            return Ok(SessionEnd::Stopped);
        }
    }
}
