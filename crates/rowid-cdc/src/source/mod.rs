//! The source: the server a slot is followed on.
//!
//! - [`start`]: the checks at start, the state file against the slot, slot creation;
//! - [`checks`]: what the server and the publication must be (the identity schema table,
//!   which published tables can give every change an identity, the slot's position);
//! - [`slot`]: creating the slot at a consistent point and reading the identity schemas
//!   there, or dropping it when a check refused;
//! - [`replication`]: the replication connection's settings (TLS and the password as the
//!   SQL connection saw them);
//! - [`snapshot`]: the initial snapshot, every published table's rows at the slot's
//!   consistent point, by binary COPY under the exported snapshot;
//! - [`chunk_reader`]: keyed tables' snapshots in chunks while the stream runs (exact by
//!   identity and transaction visibility, resumable: [`crate::chunks`]);
//! - [`stream`]: one replication session, from pgoutput messages to acknowledged positions;
//! - [`heartbeat`]: writes that move an idle database's slot forward.

pub mod checks;
pub mod chunk_reader;
pub mod heartbeat;
pub mod replication;
pub mod slot;
pub mod snapshot;
pub mod start;
pub mod stream;
