//! What the command was asked to do: the server, the slot, the sink, and how to run.

use std::path::PathBuf;
use std::time::Duration;

use rowid_registry::sql::QualifiedName;

use crate::connect::conninfo::Conninfo;
use crate::pipeline::Strictness;

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
    /// Every change's JSON line into a NATS JetStream stream, exactly once.
    Nats {
        /// The servers, comma-separated URLs.
        urls: String,
        /// The stream.
        stream: String,
        /// Replicas of a stream the sink creates.
        replicas: usize,
        /// The subjects' first tokens.
        prefix: String,
        /// Credentials and TLS.
        auth: crate::sink::nats::NatsAuth,
    },
    /// Every published table kept equal to its source by identity (`None`: in the source's
    /// database).
    Replica {
        /// The replica's database.
        dsn: Option<Box<Conninfo>>,
        /// The schema of every storage table and of the replica's own tables; `None`: each
        /// storage table in its source's schema.
        schema: Option<String>,
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
    /// With a new slot: first every published table's rows at its consistent point, as
    /// snapshot events.
    pub snapshot: bool,
    /// Snapshot these tables (`schema.table`) in chunks while streaming, each again when it
    /// was already (`--snapshot-table`).
    pub snapshot_tables: Vec<String>,
    /// Replica storage tables to empty and read again in chunks while streaming
    /// (`--repair`): the same as [`Options::snapshot_tables`], for a replica sink only.
    pub repair: Vec<String>,
    /// Rows per snapshot chunk.
    pub snapshot_chunk: i64,
    /// Time between the checkpoints of the initial copy of a table in key order.
    pub snapshot_checkpoint: std::time::Duration,
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
    /// Stop at an UPDATE whose new image lacks an unchanged TOASTed value (naming the table
    /// and the column) instead of emitting it with `unchanged_toast`.
    pub require_complete: bool,
    /// Write a heartbeat into the database this often (for a database that is itself idle).
    pub heartbeat: Option<Duration>,
    /// How long to wait at start for a slot another process holds (the server process of a
    /// consumer that has just ended holds it until it notices), and in a PostgreSQL sink's
    /// database for the session that last wrote the position (that consumer's last COMMIT).
    pub slot_wait: Duration,
    /// Serve the counters in the Prometheus text format at `http://ADDR/metrics`.
    pub metrics: Option<std::net::SocketAddr>,
}

impl Options {
    /// What stops capture instead of being emitted.
    pub fn strictness(&self) -> Strictness {
        Strictness {
            strict: self.strict,
            require_complete: self.require_complete,
        }
    }
}
