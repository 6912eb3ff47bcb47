//! # rowid-cdc: live WAL change capture with exact identities
//!
//! Follows a logical replication slot (pgoutput, protocol 1, binary values) and emits one
//! event per committed change with its Row Identity V2 identities, byte-identical to
//! `pgtrickle.encode_row_id_v2` on the same row.
//!
//! ## The data flow
//!
//! ```text
//!  source (cli)                      I/O-free core                          sink
//!  ───────────                       ─────────────                          ────
//!  start: checks, state, slot ─┐
//!  stream: pgoutput messages ──┴──▶ pipeline: capture ─▶ events ─▶ Sink::change / commit
//!        ▲                                   │                              │
//!        │                                   └──── state file ◀── Durable ──┘
//!        └──── acknowledged: the durable position ◀──┘
//! ```
//!
//! ## The invariants
//!
//! - **Exact identities**: an event's identity is the one `encode_row_id_v2` gives the row,
//!   its key taken from the identity schema in force at the change's own WAL position;
//!   schemas come only from the extension's `pgtrickle.identity_schemas` rows
//!   (spec/identity-messages.md format 2), never from what any role may write.
//! - **Nothing lost, nothing repeated**: a position is acknowledged only after the sink made
//!   everything before it durable and the state file (spec/state-file.md) holds it; a restart
//!   resumes there, the sink cut back to it.
//! - **Nothing silent**: a change whose identity cannot be derived is an explicit
//!   unidentified event (or, with `--strict`, a stop naming the table and the fix).
//! - **Bounded**: an idle slot is acknowledged forward; nothing read from the stream is
//!   trusted for sizes.
//!
//! ## The modules
//!
//! - the core, without I/O (what the fuzz target builds, without the `cli` feature):
//!   [`capture`] (pgoutput messages to [`event::ChangeEvent`]s: the schema authority,
//!   bindings checked against every Relation message, unidentified events, resume after
//!   the last acknowledged commit), [`event`] (the events' data), [`json_line`] (their JSON
//!   line), [`pipeline`] (capture into a sink and the state file, in the order that makes a
//!   restart exact), [`counters`] (what the run made durable, for its metrics), [`state`],
//!   [`lsn`], [`identity_rows`] (the messages that carry identity schemas, as a walsender
//!   sends them);
//! - [`sink`]: the one [`sink::Sink`] trait, one module per sink;
//! - with the `cli` feature, the command: [`config`] (what it was asked), [`source`] (the
//!   start checks, the slot, one replication session, heartbeats), [`connect`] (connection
//!   strings, TLS, SQL sessions), [`run`] (the loop that reconnects), [`progress`] (the
//!   progress line), [`metrics`] (the counters in the Prometheus text format, over HTTP) and
//!   [`error`] (its errors).
//!
//! Errors ([`capture::CaptureError`], [`error::CdcError`]) name the relation, key and LSN;
//! identity bytes appear only in the events themselves, never in a message (design proposal
//! §11.1).

pub mod capture;
pub mod chunks;
#[cfg(feature = "cli")]
pub mod config;
#[cfg(feature = "cli")]
pub mod connect;
pub mod counters;
#[cfg(feature = "cli")]
pub mod error;
pub mod event;
pub mod fault;
pub mod identity_rows;
pub mod json_line;
pub mod lsn;
#[cfg(feature = "cli")]
pub mod metrics;
pub mod pipeline;
#[cfg(feature = "cli")]
pub mod progress;
#[cfg(feature = "cli")]
pub mod run;
pub mod sink;
#[cfg(feature = "cli")]
pub mod source;
pub mod state;

pub use capture::{Capture, CaptureError, Output};
pub use event::{ChangeEvent, Op, Unidentified};
pub use lsn::Lsn;
pub use rowid_registry::schema_message::{RelationSchema, ReplicaIdentity, SchemaMessage};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
