//! # rowid-pgoutput: Row Identity V2 from logical replication
//!
//! This crate owns reading the WAL side: a strict decoder for PostgreSQL's `pgoutput`
//! protocol (versions 1 to 4, [`decode`] and [`message`]), the relation cache, complete
//! after-images, and identities computed from WAL values ([`identity`]) that equal the SQL
//! encoder's byte for byte. It does not connect to a server: the bytes come from whoever
//! follows the slot. Two hazards of change capture are closed:
//!
//! - **complete after-images** ([`after_image`]): an UPDATE's new tuple omits unchanged
//!   TOASTed values (`'u'`) even under REPLICA IDENTITY FULL; they are backfilled where that
//!   is exact and otherwise reported by name, never turned into NULL;
//! - **keys checked against the stream** ([`relation`], [`identity`]): a relation's identity,
//!   as `rowid-registry` resolved it, is bound to each Relation message; column flags are
//!   read from it, including the proposed primary-key and NOT NULL bits as configuration.
//!
//! Column values are zero-copy slices of the input ([`bytes::Bytes`]).

pub mod after_image;
pub mod decode;
pub mod encode;
pub mod error;
pub mod identity;
pub mod message;
mod reader;
pub mod relation;

pub use after_image::{AfterImage, IncompleteAfterImage, complete};
pub use decode::{Decoder, Options};
pub use encode::encode;
pub use error::DecodeError;
pub use identity::{
    BoundIdentity, IdentityColumn, IdentityError, RelationIdentity, RowValues, SchemaMismatch,
    ValueRef,
};
pub use message::{
    Column, CommitInfo, Message, OldTuple, PrepareInfo, Relation, RelationColumn, Tuple,
};
pub use relation::{FLAG_REPLICA_IDENTITY, FlagBits, RelationCache};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
