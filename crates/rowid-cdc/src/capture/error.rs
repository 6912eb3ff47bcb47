//! Why capture stopped. Every error names the relation, the key and the LSN it concerns;
//! none carries identity bytes (design proposal §11.1).

use std::fmt;

use rowid_pgoutput::{DecodeError, IdentityError, IncompleteAfterImage, SchemaMismatch};

use crate::event::Op;
use crate::lsn::Lsn;
use rowid_registry::schema_message::{Refusal, SchemaMessageError};

/// What stopped capture. Nothing of the transaction it happened in has been committed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureError {
    /// A pgoutput message could not be decoded.
    Decode {
        /// LSN of the message.
        lsn: Lsn,
        /// The decoder's error.
        error: DecodeError,
    },
    /// The stream broke the protocol's order (a change outside a transaction, a second
    /// Begin, a change for a relation never described, ...).
    Protocol {
        /// LSN of the message.
        lsn: Lsn,
        /// What was out of order.
        detail: String,
    },
    /// The changes held back until a new table's identity schema (`capture::hold`) could not
    /// be kept in their temporary file.
    Hold {
        /// LSN of the message being held or given back.
        lsn: Lsn,
        /// The I/O error.
        detail: String,
    },
    /// A message this consumer does not handle (streamed or two-phase transactions under
    /// protocol 1 cannot occur; they mean the replication options are not the ones asked).
    Unsupported {
        /// LSN of the message.
        lsn: Lsn,
        /// Which message.
        message: &'static str,
    },
    /// An identity schema message is malformed.
    SchemaMessage {
        /// LSN of the message.
        lsn: Lsn,
        /// What is wrong with it.
        error: SchemaMessageError,
    },
    /// A change arrived for a relation without an identity schema.
    NoSchema {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name` from the Relation message.
        relation: String,
        /// `pg_class.oid`.
        relid: u32,
    },
    /// The relation's identity schema says it has no usable identity.
    NoIdentity {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// The registry's rejection.
        refusal: Refusal,
    },
    /// The stream's description of the relation disagrees with its identity schema.
    Schema {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// What disagrees.
        mismatch: SchemaMismatch,
    },
    /// The stream's replica identity setting differs from the identity schema's.
    ReplicaIdentityDiffers {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// The schema's setting.
        schema: &'static str,
        /// The Relation message's setting.
        stream: &'static str,
    },
    /// A row gave no identity.
    Identity {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// Why.
        error: IdentityError,
    },
    /// An UPDATE's after-image lacks identity columns that the stream did not carry.
    Incomplete {
        /// LSN of the change.
        lsn: Lsn,
        /// Which columns.
        error: IncompleteAfterImage,
    },
    /// An UPDATE or DELETE whose old row the stream does not carry, so the row it removed
    /// cannot be named.
    OldRowUnavailable {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// The change.
        op: Op,
        /// Why there is no old row to read the identity from.
        why: String,
    },
}

impl CaptureError {
    /// True when the error concerns one change of one relation (its identity could not be
    /// derived): capture can go on and emit that change unidentified. False when the stream
    /// itself is broken or not what was asked for.
    pub fn is_about_one_change(&self) -> bool {
        matches!(
            self,
            CaptureError::NoSchema { .. }
                | CaptureError::NoIdentity { .. }
                | CaptureError::Schema { .. }
                | CaptureError::ReplicaIdentityDiffers { .. }
                | CaptureError::Identity { .. }
                | CaptureError::Incomplete { .. }
                | CaptureError::OldRowUnavailable { .. }
        )
    }

    /// Why a change has no identity, for an unidentified event (the event names the relation
    /// and the LSN itself): the message without them, never identity bytes.
    pub fn reason(&self) -> String {
        match self {
            CaptureError::NoSchema { .. } => "no identity schema for the relation at this \
                position: identity messages were not enabled when it was published, or it was \
                created by CREATE TABLE AS and these rows come before its schema"
                .into(),
            CaptureError::NoIdentity { refusal, .. } => format!(
                "no usable identity ({}): {}",
                refusal.sqlstate, refusal.message
            ),
            CaptureError::Schema { mismatch, .. } => mismatch.to_string(),
            CaptureError::ReplicaIdentityDiffers { schema, stream, .. } => format!(
                "the identity schema says REPLICA IDENTITY {schema}, the stream says {stream}"
            ),
            CaptureError::Identity { error, .. } => error.to_string(),
            CaptureError::Incomplete { error, .. } => error.to_string(),
            CaptureError::OldRowUnavailable { why, .. } => why.clone(),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Decode { lsn, error } => {
                write!(f, "at {lsn}: malformed pgoutput message: {error}")
            }
            CaptureError::Protocol { lsn, detail } => {
                write!(f, "at {lsn}: replication stream out of order: {detail}")
            }
            CaptureError::Hold { lsn, detail } => write!(
                f,
                "at {lsn}: the changes held until a new table's identity schema cannot be \
                 kept in a temporary file ({}): {detail}",
                std::env::temp_dir().display()
            ),
            CaptureError::Unsupported { lsn, message } => write!(
                f,
                "at {lsn}: {message} message: streamed and two-phase transactions are not \
                 consumed (replication runs with proto_version 1)"
            ),
            CaptureError::SchemaMessage { lsn, error } => write!(f, "at {lsn}: {error}"),
            CaptureError::NoSchema {
                lsn,
                relation,
                relid,
            } => write!(
                f,
                "at {lsn}: no identity schema for {relation} (OID {relid}): it was not in the \
                 snapshot or state, and no identity message described it; run \
                 SELECT pgtrickle.enable_identity_messages() before publishing new tables"
            ),
            CaptureError::NoIdentity {
                lsn,
                relation,
                refusal,
            } => write!(
                f,
                "at {lsn}: {relation} has no usable identity ({}): {}",
                refusal.sqlstate, refusal.message
            ),
            CaptureError::Schema {
                lsn,
                relation,
                mismatch,
            } => write!(f, "at {lsn}: {relation}: {mismatch}"),
            CaptureError::ReplicaIdentityDiffers {
                lsn,
                relation,
                schema,
                stream,
            } => write!(
                f,
                "at {lsn}: {relation}: the identity schema says REPLICA IDENTITY {schema}, the \
                 stream says {stream}"
            ),
            CaptureError::Identity {
                lsn,
                relation,
                error,
            } => write!(f, "at {lsn}: {relation}: {error}"),
            CaptureError::Incomplete { lsn, error } => write!(f, "at {lsn}: {error}"),
            CaptureError::OldRowUnavailable {
                lsn,
                relation,
                op,
                why,
            } => write!(
                f,
                "at {lsn}: {relation}: the {} names no row: {why}",
                op.name().to_uppercase()
            ),
        }
    }
}

impl std::error::Error for CaptureError {}
