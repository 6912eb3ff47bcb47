//! Why the command stopped ([`CdcError`]): a refusal at setup, a connection or the pipeline.

use std::fmt;

use pgwire_replication::PgWireError;

use crate::connect::net;
use crate::pipeline::PipelineError;
use crate::state::StateError;

/// Why following stopped.
#[derive(Debug)]
pub enum CdcError {
    /// The server, the slot, the publication or the tables are not usable as they are.
    Setup(String),
    /// The ordinary SQL connection failed (the message, with its SQLSTATE).
    Sql(String),
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
            CdcError::Setup(m) | CdcError::Sql(m) => write!(f, "{m}"),
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
        CdcError::Sql(net::describe(&e).0)
    }
}

/// A refusal at setup.
pub(crate) fn setup(message: impl Into<String>) -> CdcError {
    CdcError::Setup(message.into())
}
