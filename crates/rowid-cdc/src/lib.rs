//! # rowid-cdc: live WAL change capture with exact identities
//!
//! Follows a logical replication slot (pgoutput, protocol 1, binary values) and emits one
//! event per committed change with its Row Identity V2 identities, byte-identical to
//! `pgtrickle.encode_row_id_v2` on the same row. The `rowid-cdc` command ([`follow`]) runs the
//! parts below against a server:
//!
//! - identity schemas (spec/identity-messages.md format 2, implemented in
//!   `rowid_registry::schema_message` and shared with the extension that writes them): the
//!   relation's key as of a WAL position, carried in-band as rows of the extension's
//!   `pgtrickle.identity_schemas`, a table only the extension may write;
//! - [`capture`]: the state machine from pgoutput messages to [`event::ChangeEvent`]s, with
//!   the schema authority, bindings checked against every Relation message, explicit
//!   unidentified events where no identity can be derived, and resume after the last
//!   acknowledged commit;
//! - [`event`]: change events and their JSON lines; [`identity_rows`]: the messages that
//!   carry identity schemas, as a walsender sends them;
//! - [`sink`], [`state`], [`pipeline`]: JSON lines made durable at each commit, the state file
//!   written atomically after the sink, and the order between them that makes a restart
//!   neither lose nor repeat a change; [`pg_sink`]: change rows into a PostgreSQL change
//!   buffer (`rowid_registry::buffer`), committed with the sink's position;
//! - the command's connections: [`conninfo`] (libpq connection strings, `PGPASSWORD`, the
//!   password file), [`tls`] (`sslmode`), [`net`] (SQL sessions that refuse clear-text
//!   passwords without TLS), [`replication`]; and its steps: [`checks`], [`slot`],
//!   [`heartbeat`], [`progress`], with its errors in [`cdc_error`];
//! - [`lsn`]: WAL positions as PostgreSQL writes them.
//!
//! Errors ([`error::CaptureError`]) name the relation, key and LSN; identity bytes appear only
//! in the events themselves, never in a message (design proposal §11.1).

pub mod capture;
#[cfg(feature = "cli")]
pub mod cdc_error;
#[cfg(feature = "cli")]
pub mod checks;
#[cfg(feature = "cli")]
pub mod conninfo;
pub mod error;
pub mod event;
#[cfg(feature = "cli")]
pub mod follow;
#[cfg(feature = "cli")]
pub mod heartbeat;
pub mod identity_rows;
pub mod lsn;
#[cfg(feature = "cli")]
pub mod net;
#[cfg(feature = "cli")]
pub mod pg_sink;
pub mod pipeline;
#[cfg(feature = "cli")]
pub mod progress;
#[cfg(feature = "cli")]
pub mod replication;
pub mod sink;
#[cfg(feature = "cli")]
pub mod slot;
pub mod state;
#[cfg(feature = "cli")]
pub mod tls;

pub use capture::{Capture, Output};
pub use error::CaptureError;
pub use event::{ChangeEvent, Op, Unidentified};
pub use lsn::Lsn;
pub use rowid_registry::schema_message::{RelationSchema, ReplicaIdentity, SchemaMessage};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
