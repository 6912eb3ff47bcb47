//! # rowid-cdc: live WAL change capture with exact identities
//!
//! Follows a logical replication slot (pgoutput, protocol 1, binary values) and emits one
//! event per committed change with its Row Identity V2 identities, byte-identical to
//! `pgtrickle.encode_row_id_v2` on the same row. The `rowid-cdc` command ([`follow`], with
//! the connection string in [`dsn`]) runs the parts below against a server:
//!
//! - identity schema messages (spec/identity-messages.md, implemented in
//!   `rowid_registry::schema_message` and shared with the extension that writes them): the
//!   relation's key as of a WAL position, carried in-band by a transactional logical message;
//! - [`capture`]: the state machine from pgoutput messages to [`event::ChangeEvent`]s, with
//!   the schema authority, bindings checked against every Relation message, and resume
//!   after the last acknowledged commit;
//! - [`event`]: change events and their JSON lines;
//! - [`sink`], [`state`], [`pipeline`]: JSON lines made durable at each commit, the state file
//!   written atomically after the sink, and the order between them that makes a restart
//!   neither lose nor repeat a change; [`pg_sink`]: change rows into a PostgreSQL change
//!   buffer (`rowid_registry::buffer`), committed with the sink's position;
//! - [`lsn`]: WAL positions as PostgreSQL writes them.
//!
//! Errors ([`error::CaptureError`]) name the relation, key and LSN; identity bytes appear only
//! in the events themselves, never in a message (design proposal §11.1).

pub mod capture;
#[cfg(feature = "cli")]
pub mod dsn;
pub mod error;
pub mod event;
#[cfg(feature = "cli")]
pub mod follow;
pub mod lsn;
#[cfg(feature = "cli")]
pub mod pg_sink;
pub mod pipeline;
pub mod sink;
pub mod state;

pub use capture::{Capture, Output};
pub use error::CaptureError;
pub use event::{ChangeEvent, Op};
pub use lsn::Lsn;
pub use rowid_registry::schema_message::{RelationSchema, ReplicaIdentity, SchemaMessage};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
