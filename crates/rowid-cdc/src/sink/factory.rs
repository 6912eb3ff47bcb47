//! The sink the command line names, opened and checked (the `cli` feature), and which of its
//! tables are in the database being captured.

use std::collections::BTreeSet;

use super::{JsonlFile, JsonlStdout, Null, Sink, nats, postgres};
use crate::config::{Options, SinkSpec};
use crate::error::CdcError;
use crate::state::State;

/// Opens the sink `opts` names. `state`: the state file's record (`None`: there is none
/// yet, so the sink must hold nothing); `source_database`: the captured database
/// (`system_identifier/database OID`, when readable), so a sink writing into it skips its own
/// tables' changes.
/// `counters`: where a sink reports what it awaits (`--metrics`).
pub fn open(
    opts: &Options,
    state: Option<&State>,
    source_database: Option<&str>,
    counters: Option<&crate::counters::SharedCounters>,
) -> Result<Box<dyn Sink>, CdcError> {
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
                source_database: source_database.map(str::to_string),
                in_source: dsn.is_none(),
                wait: opts.slot_wait,
            })
            .map_err(CdcError::Sink)?,
        ),
        SinkSpec::Nats {
            urls,
            stream,
            replicas,
            prefix,
            auth,
        } => Box::new(
            nats::NatsSink::open(nats::NatsTarget {
                urls: urls.clone(),
                stream: stream.clone(),
                replicas: *replicas,
                prefix: prefix.clone(),
                slot: opts.slot.clone(),
                database: opts.dsn.dbname.clone(),
                fresh: state.is_none(),
                auth: auth.clone(),
                acks_pending: counters.map(|c| c.acks_pending()),
            })
            .map_err(CdcError::Sink)?,
        ),
        SinkSpec::Replica { dsn, schema } => Box::new(
            postgres::PostgresSink::open_replica(postgres::ReplicaTarget {
                config: dsn.as_deref().unwrap_or(&opts.dsn).clone(),
                slot: opts.slot.clone(),
                fresh: state.is_none(),
                source_database: source_database.map(str::to_string),
                in_source: dsn.is_none(),
                schema: schema.clone(),
                wait: opts.slot_wait,
            })
            .map_err(CdcError::Sink)?,
        ),
    })
}

/// The sink's own tables when they are in the database being captured (`source_database`):
/// they are not captured, or their writes would come back through the slot for ever.
pub fn own_tables_in_source(
    opts: &Options,
    sink: &dyn Sink,
    source_database: Option<&str>,
) -> BTreeSet<u32> {
    match (&opts.sink, sink.own_tables()) {
        (
            SinkSpec::Postgres { dsn, .. } | SinkSpec::Replica { dsn, .. },
            Some((database, tables)),
        ) if dsn.is_none() || (database.is_some() && database.as_deref() == source_database) => {
            eprintln!(
                "rowid-cdc: the sink's own tables (OIDs {tables:?}) are in the captured database: \
                 their changes are not captured"
            );
            tables.into_iter().collect()
        }
        _ => BTreeSet::new(),
    }
}
