//! Following a slot: the checks at start, the slot's creation with the identity schemas read
//! at its consistent point, the replication stream into the pipeline, acknowledgements after
//! durability, a progress line, and reconnection with backoff when the connection drops.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationEvent};
use rowid_codec::Domain;
use rowid_pgoutput::{CommitInfo, FlagBits, Message};
use rowid_registry::schema_message::{RelationSchema, ReplicaIdentity, SchemaMessage};
use rowid_registry::sql::QualifiedName;
use tokio_postgres::{Client, GenericClient, NoTls};

use crate::capture::Capture;
use crate::dsn::Dsn;
use crate::lsn::Lsn;
use crate::pg_sink::{PostgresSink, Target};
use crate::pipeline::{Pipeline, PipelineError};
use crate::sink::{JsonlFile, JsonlStdout, Null, Sink};
use crate::state::{State, StateError};

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
        dsn: Option<Box<Dsn>>,
        /// The buffer.
        buffer: QualifiedName,
    },
}

/// What to follow and where to write.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server.
    pub dsn: Dsn,
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
}

/// Why following stopped.
#[derive(Debug)]
pub enum CdcError {
    /// The server, the slot, the publication or the tables are not usable as they are.
    Setup(String),
    /// The ordinary SQL connection failed.
    Sql(tokio_postgres::Error),
    /// The replication connection failed for good.
    Replication(PgWireError),
    /// Capture, sink or state failed.
    Pipeline(PipelineError),
    /// The state file.
    State(StateError),
    /// The sink could not be opened.
    Sink(std::io::Error),
}

impl fmt::Display for CdcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CdcError::Setup(m) => write!(f, "{m}"),
            CdcError::Sql(e) => match e.as_db_error() {
                Some(db) => write!(f, "{}: {}", db.code().code(), db.message()),
                None => {
                    // tokio-postgres puts the cause (refused, no such socket, ...) in the source.
                    write!(f, "{e}")?;
                    let mut source = std::error::Error::source(e);
                    while let Some(s) = source {
                        write!(f, ": {s}")?;
                        source = s.source();
                    }
                    Ok(())
                }
            },
            CdcError::Replication(e) => write!(f, "replication connection: {e}"),
            CdcError::Pipeline(e) => write!(f, "{e}"),
            CdcError::State(e) => write!(f, "{e}"),
            CdcError::Sink(e) => write!(f, "sink: {e}"),
        }
    }
}

impl std::error::Error for CdcError {}

impl From<tokio_postgres::Error> for CdcError {
    fn from(e: tokio_postgres::Error) -> CdcError {
        CdcError::Sql(e)
    }
}

fn setup(message: impl Into<String>) -> CdcError {
    CdcError::Setup(message.into())
}

/// Slot names reach START_REPLICATION unquoted: PostgreSQL's own rule for them.
fn check_slot_name(slot: &str) -> Result<(), CdcError> {
    let ok = !slot.is_empty()
        && slot.len() < 64
        && slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(setup(format!(
            "--slot {slot:?}: a replication slot name has 1-63 lower-case letters, digits and \
             underscores"
        )))
    }
}

async fn connect_sql(dsn: &Dsn) -> Result<Client, CdcError> {
    let (client, connection) = dsn.sql().connect(NoTls).await.map_err(|e| {
        setup(format!(
            "cannot connect to {}: {}",
            dsn.describe(),
            CdcError::Sql(e)
        ))
    })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The server-side facts checked before anything is created or streamed.
async fn check_server(client: &Client, opts: &Options) -> Result<(), CdcError> {
    let wal_level: String = client.query_one("SHOW wal_level", &[]).await?.get(0);
    if wal_level != "logical" {
        return Err(setup(format!(
            "wal_level is {wal_level}: logical decoding needs wal_level = logical \
             (ALTER SYSTEM SET wal_level = logical, then restart the server)"
        )));
    }
    let publication = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&opts.publication],
        )
        .await?;
    if publication.is_none() {
        return Err(setup(format!(
            "publication {:?} does not exist in this database (CREATE PUBLICATION {} FOR ...)",
            opts.publication, opts.publication
        )));
    }
    let triggers: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_event_trigger WHERE evtname IN \
             ('pgtrickle_identity_ddl', 'pgtrickle_identity_drop') AND evtenabled <> 'D'",
            &[],
        )
        .await?
        .get(0);
    if triggers != 2 {
        return Err(setup(
            "identity messages are not enabled: without them a key changed while changes are \
             in flight would be applied to the wrong changes. As a superuser: CREATE EXTENSION \
             IF NOT EXISTS pg_trickle_ext; SELECT pgtrickle.enable_identity_messages();",
        ));
    }
    Ok(())
}

/// The published tables' identity schemas, as the connection's snapshot sees them.
async fn read_schemas(
    client: &impl GenericClient,
    publication: &str,
) -> Result<Vec<RelationSchema>, CdcError> {
    let rows = client
        .query(
            "SELECT pgtrickle.identity_schema(format('%I.%I', schemaname, tablename)::regclass) \
             FROM pg_publication_tables WHERE pubname = $1 ORDER BY schemaname, tablename",
            &[&publication],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let json: String = r.get(0);
            match SchemaMessage::parse(json.as_bytes()) {
                Ok(SchemaMessage::Schema(s)) => Ok(s),
                Ok(other) => Err(setup(format!("unexpected identity message {other:?}"))),
                Err(e) => Err(setup(format!("pgtrickle.identity_schema: {e}"))),
            }
        })
        .collect()
}

/// Every published table must have an identity the WAL can carry; all offenders are named.
fn check_identities(schemas: &[RelationSchema]) -> Result<(), CdcError> {
    let mut problems = Vec::new();
    for s in schemas {
        let name = s.qualified_name();
        match (&s.identity, s.replica_identity) {
            (_, ReplicaIdentity::Nothing) => problems.push(format!(
                "{name}: REPLICA IDENTITY NOTHING (updates and deletes carry no old key)"
            )),
            (Err(r), _) => problems.push(format!(
                "{name}: no usable identity ({}): {}",
                r.sqlstate, r.message
            )),
            (Ok(def), ri) if def.domain == Domain::KeylessRow && ri != ReplicaIdentity::Full => {
                problems.push(format!(
                    "{name}: no eligible key and REPLICA IDENTITY {}: a keyless identity needs \
                     REPLICA IDENTITY FULL (ALTER TABLE {name} REPLICA IDENTITY FULL)",
                    ri.name()
                ));
            }
            _ => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(setup(format!(
            "published tables without a usable identity:\n  {}",
            problems.join("\n  ")
        )))
    }
}

/// A slot as `pg_replication_slots` shows it.
struct SlotInfo {
    active_pid: Option<i32>,
    plugin: Option<String>,
}

/// The slot, if it exists; slot names are cluster-wide, so one of another database or kind
/// is an error naming it.
async fn slot_info(client: &Client, slot: &str) -> Result<Option<SlotInfo>, CdcError> {
    let Some(row) = client
        .query_opt(
            "SELECT active_pid, plugin::text, slot_type, database::text, \
                    database = current_database() \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
    else {
        return Ok(None);
    };
    let kind: String = row.get(2);
    let plugin: Option<String> = row.get(1);
    if kind != "logical" || plugin.as_deref() != Some("pgoutput") {
        return Err(setup(format!(
            "slot {slot:?} is a {kind} slot with plugin {}: rowid-cdc needs a logical pgoutput slot",
            plugin.unwrap_or_else(|| "none".into())
        )));
    }
    if row.get::<_, Option<bool>>(4) != Some(true) {
        return Err(setup(format!(
            "slot {slot:?} belongs to database {}: slot names are cluster-wide, choose another",
            row.get::<_, Option<String>>(3).unwrap_or_default()
        )));
    }
    Ok(Some(SlotInfo {
        active_pid: row.get(0),
        plugin,
    }))
}

/// Creates the slot and reads the identity schemas at its consistent point; returns the
/// started-to-be client (gated: not streaming yet) and the initial state.
async fn create_slot(
    client: &mut Client,
    opts: &Options,
) -> Result<(ReplicationClient, State), CdcError> {
    let cfg = opts.dsn.replication(&opts.slot, &opts.publication);
    let mut repl = ReplicationClient::connect_gated(cfg)
        .await
        .map_err(CdcError::Replication)?;
    let rows = repl
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')",
            opts.slot
        ))
        .await
        .map_err(CdcError::Replication)?;
    let field = |i: usize| {
        rows.first()
            .and_then(|r| r.get(i).cloned().flatten())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok_or_else(|| setup("CREATE_REPLICATION_SLOT returned no row"))
    };
    let consistent: Lsn = field(1)?
        .parse()
        .map_err(|e| setup(format!("consistent point: {e}")))?;
    let snapshot = field(2)?;
    // The exported snapshot lives until the replication connection's next command: read the
    // schemas as of the consistent point now, before START_REPLICATION.
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    tx.batch_execute(&format!(
        "SET TRANSACTION SNAPSHOT '{}'",
        snapshot.replace('\'', "''")
    ))
    .await?;
    let schemas = read_schemas(&tx, &opts.publication).await?;
    tx.commit().await?;
    check_identities(&schemas)?;
    let state = State {
        slot: opts.slot.clone(),
        publication: opts.publication.clone(),
        commit_lsn: Lsn::ZERO,
        end_lsn: consistent,
        sink_len: None,
        schemas,
    };
    Ok((repl, state))
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
                config: dsn.as_deref().unwrap_or(&opts.dsn).sql().clone(),
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
) -> Result<Pipeline<Box<dyn Sink>>, CdcError> {
    let capture = Capture::new(state.schemas.clone(), state.commit_lsn, FlagBits::default())
        .with_delivered(sink.delivered().unwrap_or(Lsn::ZERO));
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

/// Follows the slot until asked to stop or an error that retrying cannot fix.
pub async fn run(opts: Options) -> Result<(), CdcError> {
    check_slot_name(&opts.slot)?;
    let mut client = connect_sql(&opts.dsn).await?;
    check_server(&client, &opts).await?;
    let saved = State::load(&opts.state).map_err(CdcError::State)?;
    if let Some(state) = &saved
        && (state.slot != opts.slot || state.publication != opts.publication)
    {
        return Err(setup(format!(
            "{} belongs to slot {:?} and publication {:?}, not {:?} and {:?}",
            opts.state.display(),
            state.slot,
            state.publication,
            opts.slot,
            opts.publication
        )));
    }
    let slot = slot_info(&client, &opts.slot).await?;
    if let Some(pid) = slot.as_ref().and_then(|s| s.active_pid) {
        return Err(setup(format!(
            "slot {:?} is in use by the process with PID {pid}",
            opts.slot
        )));
    }
    // The sink is opened (and checked) before a slot is created, so that a refused sink
    // leaves nothing behind.
    let sink = open_sink(&opts, saved.as_ref())?;
    let (mut gated, state) = match (saved, slot) {
        (Some(state), Some(_)) => {
            check_identities(&state.schemas)?;
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
        (None, Some(slot)) => {
            return Err(setup(format!(
                "slot {:?} exists (plugin {}) but {} does not: the identity schemas as of its \
                 position are unknown. Give the state file that followed it, or drop the slot \
                 and start with --create-slot",
                opts.slot,
                slot.plugin.unwrap_or_default(),
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
            let (repl, state) = create_slot(&mut client, &opts).await?;
            (Some(repl), state)
        }
    };
    drop(client);

    let mut pipe = pipeline(&opts, state, sink)?;
    let mut backoff = Duration::from_millis(250);
    let mut progress = Progress::new(opts.progress);
    loop {
        let start = pipe.state().end_lsn;
        let repl = match gated.take() {
            Some(r) => Ok(r),
            None => {
                let cfg = opts
                    .dsn
                    .replication(&opts.slot, &opts.publication)
                    .with_start_lsn(pgwire_replication::Lsn::from_u64(start.0));
                ReplicationClient::connect_gated(cfg).await
            }
        };
        let end = match repl {
            Ok(mut repl) => match repl.start().await {
                Ok(()) => {
                    backoff = Duration::from_millis(250);
                    match stream(&mut repl, &mut pipe, &opts, &mut progress).await {
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
                progress.line(&pipe, true);
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
                    match open_sink(&opts, Some(&state)) {
                        Ok(sink) => break pipeline(&opts, state.clone(), sink)?,
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

async fn stream(
    repl: &mut ReplicationClient,
    pipe: &mut Pipeline<Box<dyn Sink>>,
    opts: &Options,
    progress: &mut Progress,
) -> Result<SessionEnd, CdcError> {
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
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
            } => pipe.apply(
                Lsn(lsn.as_u64()),
                Message::Message {
                    xid: None,
                    transactional,
                    lsn: lsn.as_u64(),
                    prefix,
                    content,
                },
            ),
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                progress.server_end = progress.server_end.max(wal_end.as_u64());
                Ok(None)
            }
            ReplicationEvent::StoppedAt { .. } => return Ok(SessionEnd::Stopped),
        }
        .map_err(CdcError::Pipeline)?;
        if let Some(lsn) = ack {
            repl.update_applied_lsn(pgwire_replication::Lsn::from_u64(lsn.0));
            progress.server_end = progress.server_end.max(lsn.0);
        }
        progress.line(pipe, false);
        if opts
            .stop_after
            .is_some_and(|n| pipe.progress().changes >= n && !pipe.in_transaction())
        {
            repl.stop();
            return Ok(SessionEnd::Stopped);
        }
    }
}

/// The progress line: at most once a second, on stderr.
struct Progress {
    enabled: bool,
    last: Instant,
    last_changes: u64,
    /// The highest WAL position the server reported.
    server_end: u64,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            last: Instant::now(),
            last_changes: 0,
            server_end: 0,
        }
    }

    fn line(&mut self, pipe: &Pipeline<Box<dyn Sink>>, last: bool) {
        let elapsed = self.last.elapsed();
        if !self.enabled || (!last && elapsed < Duration::from_secs(1)) {
            return;
        }
        let p = pipe.progress();
        let rate = (p.changes - self.last_changes) as f64 / elapsed.as_secs_f64().max(1e-3);
        let peak = if last {
            peak_rss_kib().map_or(String::new(), |k| format!(", peak RSS {} KiB", k))
        } else {
            String::new()
        };
        eprintln!(
            "rowid-cdc: {} changes ({rate:.0}/s), {} transactions durable up to {}, lag {} bytes{peak}",
            p.changes,
            p.transactions,
            p.durable,
            self.server_end.saturating_sub(p.durable.0)
        );
        self.last = Instant::now();
        self.last_changes = p.changes;
    }
}

/// The process's peak resident set size (`VmHWM`), where /proc has it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
