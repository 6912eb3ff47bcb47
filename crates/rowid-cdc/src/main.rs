//! `rowid-cdc`: follow a logical replication slot and write one JSON line per committed change
//! with its Row Identity V2 identities.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use std::time::Duration;

use rowid_cdc::config::{Options, SinkSpec};
use rowid_cdc::connect::conninfo::Conninfo;
use rowid_cdc::run::run;
use rowid_cdc::sink::nats::NatsAuth;
use rowid_cdc::sink::postgres::default_buffer;
use rowid_registry::sql::QualifiedName;

/// Follows a logical replication slot and writes one JSON line per committed change, with
/// its Row Identity V2 identities (byte-identical to pgtrickle.encode_row_id_v2), the key
/// taken from the table's identity schema at the change's own WAL position.
#[derive(Parser, Debug)]
#[command(
    name = "rowid-cdc",
    version,
    after_help = "\
Example (first run creates the slot and reads the keys at its consistent point):

  psql -d app -c 'CREATE EXTENSION pg_trickle_ext' \\
              -c 'SELECT pgtrickle.enable_identity_messages()' \\
              -c 'CREATE PUBLICATION cdc FOR TABLE orders, customers'
  rowid-cdc --dsn 'host=/var/run/postgresql dbname=app user=cdc' \\
            --slot rowid_cdc --publication cdc --create-slot \\
            --state cdc.state --sink jsonl:changes.jsonl --progress

Later runs resume from cdc.state (the file is fsynced at each commit before the position is
acknowledged). Needs wal_level = logical and a role with LOGIN REPLICATION (for the
postgres sink into pgtrickle_changes also: SELECT pgtrickle.grant_capture('cdc')).
The password comes from the DSN, PGPASSWORD or ~/.pgpass, as with libpq (in the DSN,
other users can read it in ps: prefer the others, or ROWID_CDC_DSN); it is never printed,
logged or written to the state file, and never sent in clear text without TLS. TLS:
sslmode=disable|prefer|require|verify-ca|verify-full and sslrootcert=FILE in the DSN."
)]
struct Args {
    /// libpq connection string or URI (`host=/tmp port=5432 dbname=app user=cdc`), with
    /// libpq's environment fallbacks (PGHOST, PGUSER, PGPASSWORD, PGSSLMODE, ...).
    #[arg(
        long,
        value_name = "DSN",
        env = "ROWID_CDC_DSN",
        hide_env_values = true
    )]
    dsn: Conninfo,
    /// Logical replication slot (pgoutput).
    #[arg(long)]
    slot: String,
    /// Publication whose tables are captured.
    #[arg(long)]
    publication: String,
    /// Create the slot when there is no state file yet.
    #[arg(long)]
    create_slot: bool,
    /// With --create-slot: every published table's rows as "op":"snapshot" events, copied
    /// under the slot's exported snapshot before the stream starts. Tables with an ordered
    /// key are copied last, in key order, their position recorded (--snapshot-checkpoint):
    /// a run killed during their copy goes on in chunks while streaming, exact by identity;
    /// the others are not resumable (a run killed during their copy is refused at restart,
    /// naming the fix). Not into a change buffer (its rows are changes).
    #[arg(long, requires = "create_slot")]
    snapshot: bool,
    /// Snapshot this table (`schema.table`, repeatable) in chunks while streaming: a table
    /// added to the publication, or one to read again. Its first chunk opens with a truncate
    /// of the table: what a consumer held of it is replaced.
    #[arg(long, value_name = "SCHEMA.TABLE")]
    snapshot_table: Vec<String>,
    /// With a replica sink: empty this table's storage table and read the table into it
    /// again in chunks while streaming (`schema.table`, repeatable), after the replica stopped
    /// because the storage no longer equals its source. Give it once: a later run without it
    /// goes on with the chunks from where the last one stopped.
    #[arg(long, value_name = "SCHEMA.TABLE")]
    repair: Vec<String>,
    /// Rows per snapshot chunk.
    #[arg(long, value_name = "ROWS", default_value_t = rowid_cdc::source::chunk_reader::DEFAULT_CHUNK_ROWS, value_parser = clap::value_parser!(i64).range(1..))]
    snapshot_chunk: i64,
    /// Seconds between the checkpoints of the initial copy of a table in key order (its rows
    /// made durable, its position recorded; 0: every 4096 rows): what a run killed during it
    /// reads again, against a sink flush and a state file write each.
    #[arg(long, value_name = "SECS", default_value_t = 1)]
    snapshot_checkpoint: u64,
    /// State file: slot, last durable commit, identity schemas.
    #[arg(long, default_value = "rowid-cdc.state")]
    state: PathBuf,
    /// Where events go: `jsonl:FILE`, `jsonl:-` (standard output), `-`, `null`,
    /// `postgres:DSN` (change rows into a buffer; `postgres:` alone: the source database),
    /// `nats:URL[,URL...]` (JSON lines into a NATS JetStream stream, exactly once), or
    /// `replica:DSN` (every published table kept equal to its source by identity, in a
    /// storage table of the same name; `replica:` alone: the source database, in another
    /// schema).
    #[arg(long, default_value = "-", value_parser = parse_sink)]
    sink: SinkSpec,
    /// The change buffers of a postgres sink, `SCHEMA.PREFIX` or `PREFIX`: one per source
    /// table, `SCHEMA.PREFIX_<source oid>` (created from the registry's DDL when missing,
    /// refused when its columns, owner or versions differ).
    #[arg(long, value_name = "SCHEMA.PREFIX", value_parser = parse_buffer, default_value = "pgtrickle_changes.rowid_cdc")]
    buffer: QualifiedName,
    /// The schema of a replica's storage tables and of its own tables (created when missing).
    /// Without it, each storage table is in its source table's schema and the replica's own
    /// tables in pgtrickle_replica; with `replica:` alone (the source database) every storage
    /// table is in pgtrickle_replica.
    #[arg(long, value_name = "SCHEMA")]
    replica_schema: Option<String>,
    /// Print a progress line (changes/s, lag in bytes) on stderr, at most once a second.
    #[arg(long)]
    progress: bool,
    /// Stop after this many changes (at a transaction's end).
    #[arg(long, value_name = "N")]
    stop_after: Option<u64>,
    /// Refuse to start while a published table cannot give every change an identity, and stop
    /// at a change without one (naming the table and the fix), instead of emitting it as an
    /// "unidentified" event.
    #[arg(long)]
    strict: bool,
    /// Stop at an UPDATE whose new image lacks an unchanged TOASTed value the stream did not
    /// send (REPLICA IDENTITY DEFAULT or USING INDEX), naming the table and the column,
    /// instead of emitting it with "unchanged_toast": for consumers that must never see a
    /// partial after-image.
    #[arg(long)]
    require_complete: bool,
    /// Write a heartbeat into the database every SECS seconds, so that the slot's position
    /// advances when this database is idle while others in the cluster write.
    #[arg(long, value_name = "SECS")]
    heartbeat: Option<u64>,
    /// Seconds to wait at start for a slot that another process holds to be released, before
    /// refusing: the server process of a consumer that has just ended holds it until it notices.
    /// A PostgreSQL sink waits as long for the session that last wrote its position (that
    /// consumer's, finishing its last COMMIT)
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    slot_wait: u64,
    /// Serve the run's counters in the Prometheus text format at http://ADDR/metrics (for
    /// example 127.0.0.1:9187; port 0 picks a free one, named on stderr): changes and
    /// transactions made durable by relation and operation, the durable position, the lag in
    /// bytes, seconds since the last commit, snapshot rows and tables, reconnections, refused
    /// and unidentified changes. Every sink reports them.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// With `--sink nats:URL[,URL...]`: the JetStream stream (created when missing, with
    /// subjects PREFIX.>; one whose subjects do not hold them is refused).
    #[arg(long, value_name = "NAME", default_value = "ROWID_CDC")]
    nats_stream: String,
    /// Replicas of a stream the NATS sink creates.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    nats_replicas: u8,
    /// The NATS subjects' first tokens: changes go to PREFIX.<database>.<schema>.<table>
    /// (each name one token, escaped: spec/nats.md), the slot's markers to PREFIX._slot.<slot>.
    #[arg(long, value_name = "PREFIX", default_value = "rowid_cdc")]
    nats_subject_prefix: String,
    /// A NATS credentials file (JWT and NKey seed). A token comes from ROWID_CDC_NATS_TOKEN,
    /// a user and password from ROWID_CDC_NATS_USER and ROWID_CDC_NATS_PASSWORD (never from
    /// the command line, where other users can read them).
    #[arg(long, value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// Require TLS to the NATS servers (also implied by tls:// URLs and the files below).
    #[arg(long)]
    nats_tls: bool,
    /// Root certificates (PEM) to verify the NATS servers with.
    #[arg(long, value_name = "FILE")]
    nats_tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for the NATS servers, with --nats-tls-key.
    #[arg(long, value_name = "FILE", requires = "nats_tls_key")]
    nats_tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "nats_tls_cert")]
    nats_tls_key: Option<PathBuf>,
}

fn parse_sink(s: &str) -> Result<SinkSpec, String> {
    match s {
        "-" | "jsonl:-" => Ok(SinkSpec::Stdout),
        "null" => Ok(SinkSpec::Null),
        _ => {
            if let Some(dsn) = s.strip_prefix("postgres:") {
                let dsn = if dsn.trim().is_empty() {
                    None
                } else {
                    Some(Box::new(
                        dsn.parse::<Conninfo>().map_err(|e| e.to_string())?,
                    ))
                };
                return Ok(SinkSpec::Postgres {
                    dsn,
                    buffer: default_buffer(),
                });
            }
            if let Some(urls) = s.strip_prefix("nats:") {
                if urls.trim().is_empty() {
                    return Err("nats: needs the servers' URLs (nats://host:4222,...)".into());
                }
                return Ok(SinkSpec::Nats {
                    urls: urls.to_string(),
                    stream: String::new(),
                    replicas: 1,
                    prefix: String::new(),
                    auth: NatsAuth::default(),
                });
            }
            if let Some(dsn) = s.strip_prefix("replica:") {
                let dsn = if dsn.trim().is_empty() {
                    None
                } else {
                    Some(Box::new(
                        dsn.parse::<Conninfo>().map_err(|e| e.to_string())?,
                    ))
                };
                return Ok(SinkSpec::Replica { dsn, schema: None });
            }
            match s.strip_prefix("jsonl:") {
                Some(path) if !path.is_empty() => Ok(SinkSpec::File(PathBuf::from(path))),
                _ => Err(format!(
                    "{s:?}: expected jsonl:FILE, jsonl:-, -, null, postgres:DSN, nats:URL or replica:DSN"
                )),
            }
        }
    }
}

fn parse_buffer(s: &str) -> Result<QualifiedName, String> {
    let ok = |p: &str| !p.is_empty() && !p.contains('.');
    match s.split_once('.') {
        Some((schema, name)) if ok(schema) && ok(name) => Ok(QualifiedName::new(schema, name)),
        None if ok(s) => Ok(QualifiedName::new(
            rowid_registry::buffer::DEFAULT_SCHEMA,
            s,
        )),
        _ => Err(format!("{s:?}: expected SCHEMA.TABLE or TABLE")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // rustls is built with two providers (pgwire-replication enables aws-lc-rs, this crate
    // ring): a library that asks rustls for the process's default (the NATS client does)
    // panics unless one is installed. The SQL connections name ring themselves.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let opts = Options {
        dsn: args.dsn,
        slot: args.slot,
        publication: args.publication,
        create_slot: args.create_slot,
        snapshot: args.snapshot,
        snapshot_tables: args.snapshot_table,
        repair: args.repair,
        snapshot_chunk: args.snapshot_chunk,
        snapshot_checkpoint: Duration::from_secs(args.snapshot_checkpoint),
        state: args.state,
        sink: match args.sink {
            SinkSpec::Postgres { dsn, .. } => SinkSpec::Postgres {
                dsn,
                buffer: args.buffer,
            },
            SinkSpec::Replica { dsn, .. } => {
                // In the source database, never the source tables' own schemas.
                let schema = match (&dsn, args.replica_schema) {
                    (_, Some(schema)) => Some(schema),
                    (None, None) => Some(rowid_registry::replica::DEFAULT_SCHEMA.to_string()),
                    (Some(_), None) => None,
                };
                SinkSpec::Replica { dsn, schema }
            }
            SinkSpec::Nats { urls, .. } => {
                if urls.split(',').any(|u| u.contains('@')) {
                    eprintln!(
                        "rowid-cdc: warning: a NATS URL carries user information, where other \
                         users of this machine can read it (ps); use ROWID_CDC_NATS_USER and \
                         ROWID_CDC_NATS_PASSWORD, ROWID_CDC_NATS_TOKEN or --nats-creds"
                    );
                }
                let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
                let tls_urls = urls.split(',').any(|u| u.trim().starts_with("tls://"));
                SinkSpec::Nats {
                    urls,
                    stream: args.nats_stream,
                    replicas: usize::from(args.nats_replicas),
                    prefix: args.nats_subject_prefix,
                    auth: NatsAuth {
                        creds: args.nats_creds,
                        token: env("ROWID_CDC_NATS_TOKEN"),
                        user: env("ROWID_CDC_NATS_USER")
                            .map(|u| (u, env("ROWID_CDC_NATS_PASSWORD").unwrap_or_default())),
                        tls: args.nats_tls || tls_urls,
                        tls_ca: args.nats_tls_ca,
                        tls_cert: args.nats_tls_cert.zip(args.nats_tls_key),
                    },
                }
            }
            other => other,
        },
        progress: args.progress,
        stop_after: args.stop_after,
        strict: args.strict,
        require_complete: args.require_complete,
        heartbeat: args.heartbeat.map(|s| Duration::from_secs(s.max(1))),
        slot_wait: Duration::from_secs(args.slot_wait),
        metrics: args.metrics,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rowid-cdc: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rowid-cdc: {e}");
            ExitCode::FAILURE
        }
    }
}
