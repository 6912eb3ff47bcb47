//! The sink the command line names, opened and checked (the `cli` feature).

use super::{JsonlFile, JsonlStdout, Null, Sink, postgres};
use crate::config::{Options, SinkSpec};
use crate::error::CdcError;
use crate::state::State;

/// Opens the sink `opts` names. `state`: the state file's record (`None`: there is none
/// yet, so the sink must hold nothing).
pub fn open(opts: &Options, state: Option<&State>) -> Result<Box<dyn Sink>, CdcError> {
    Ok(match &opts.sink {
        SinkSpec::Stdout => Box::new(JsonlStdout::new()),
        SinkSpec::Null => Box::new(Null::default()),
        SinkSpec::File(path) => Box::new(
            JsonlFile::open(path, state.and_then(|s| s.sink.as_ref())).map_err(CdcError::Sink)?,
        ),
        SinkSpec::Postgres { dsn, buffer } => Box::new(
            postgres::PostgresSink::open(postgres::Target {
                config: dsn.as_deref().unwrap_or(&opts.dsn).clone(),
                buffer: buffer.clone(),
                slot: opts.slot.clone(),
                fresh: state.is_none(),
            })
            .map_err(CdcError::Sink)?,
        ),
    })
}
