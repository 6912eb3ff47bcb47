//! # rowid-pgoutput: Row Identity V2 from logical replication
//!
//! A strict decoder for PostgreSQL's `pgoutput` protocol (versions 1 to 4), with the two
//! hazards of change capture closed:
//!
//! - **complete after-images** ([`after_image`]): an UPDATE's new tuple omits unchanged
//!   TOASTed values (`'u'`) even under REPLICA IDENTITY FULL; they are backfilled where that
//!   is exact and otherwise reported by name, never turned into NULL;
//! - **keys from the stream, not a side connection** ([`relation`]): column flags are read
//!   from each Relation message, including the proposed primary-key and NOT NULL bits as
//!   configuration.
//!
//! Column values are zero-copy slices of the input ([`bytes::Bytes`]).

pub mod after_image;
pub mod decode;
pub mod error;
pub mod identity;
pub mod message;
mod reader;
pub mod relation;

pub use after_image::{AfterImage, IncompleteAfterImage, complete};
pub use decode::{Decoder, Options};
pub use error::DecodeError;
pub use identity::{BoundIdentity, IdentityColumn, IdentityError, IdentitySchema, SchemaMismatch};
pub use message::{Column, Message, OldTuple, Relation, RelationColumn, Tuple};
pub use relation::{FLAG_REPLICA_IDENTITY, FlagBits, RelationCache};
