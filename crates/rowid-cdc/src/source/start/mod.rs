//! The checks at start: the server, the state file, the slot (created at a consistent point,
//! with the identity schemas as of it, when there is none yet), the sink opened and checked
//! before anything is created, which tables are the sink's own, and (`--snapshot`) the
//! initial snapshot into the pipeline before the stream starts.
//!
//! `start` runs them in order; each phase has its module: `refusals` (what the state file and
//! the flags refuse), `position` (the slot resumed or created), `plan` (the tables read
//! besides the stream); the copy itself is [`super::snapshot::initial`].

mod plan;
mod position;
mod refusals;

use std::collections::BTreeSet;

use pgwire_replication::ReplicationClient;

use super::{checks, slot, snapshot};
use crate::config::Options;
use crate::connect::net::{self, Session};
use crate::counters::SharedCounters;
use crate::error::CdcError;
use crate::pipeline::Pipeline;
use crate::sink::{self, Sink};
use crate::state::State;

/// What the checks at start leave for following: the pipeline from the resume position into
/// the sink, what not to capture, how to reach the replication connection.
pub(crate) struct Started {
    /// The replication connection that created the slot (a new slot), not streaming yet.
    pub(crate) gated: Option<ReplicationClient>,
    pub(crate) pipe: Pipeline<Box<dyn Sink>>,
    /// The sink's own tables in the captured database.
    pub(crate) ignored: BTreeSet<u32>,
    /// The captured database (`system_identifier/database OID`, when readable): a sink
    /// reopened after a lost connection is told it again.
    pub(crate) source_database: Option<String>,
    /// What the SQL connection saw of the server (TLS, authentication, certificate).
    pub(crate) seen: Session,
}

/// The checks at start, the state, the sink and (with `--create-slot`) the slot; the pipeline
/// reports to `counters` when given (`--metrics`), from the snapshot on. In this order, so
/// that a refusal leaves nothing behind: the flags and the state file against the server, the
/// slot released, the sink opened and checked, the slot resumed or created, then the tables
/// to copy and, with `--snapshot`, the copy itself.
pub(crate) async fn start(
    opts: &Options,
    counters: Option<&SharedCounters>,
) -> Result<Started, CdcError> {
    slot::check_name(&opts.slot)?;
    if opts.dsn.password_on_command_line() {
        eprintln!(
            "rowid-cdc: warning: the password is in --dsn, where other users of this machine \
             can read it (ps); use PGPASSWORD, ~/.pgpass or ROWID_CDC_DSN"
        );
    }
    let (mut client, seen) = checks::connect(&opts.dsn).await?;
    let identity_table = checks::server(&client, &opts.publication).await?;
    refusals::check_publication(
        opts,
        &checks::publication_gaps(&client, &opts.publication).await?,
    )?;
    let saved = State::load(&opts.state).map_err(CdcError::State)?;
    if let Some(state) = &saved {
        refusals::check_state_file(opts, state, identity_table)?;
    }
    refusals::check_snapshot_flags(opts, saved.as_ref())?;
    let info = slot::released(&client, &opts.slot, opts.slot_wait).await?;
    // The sink is opened (and checked) before a slot is created, so that a refused sink
    // leaves nothing behind.
    let source_database = net::database_id(&client).await;
    let sink = sink::factory::open(opts, saved.as_ref(), source_database.as_deref(), counters)?;
    let ignored = sink::factory::own_tables_in_source(opts, &*sink, source_database.as_deref());
    let position = match saved {
        Some(state) => position::resume(opts, state, info, &ignored)?,
        None => position::create(opts, &mut client, &seen, identity_table, info, &ignored).await?,
    };
    let mut state = position.state;
    let (gated, exported) = match position.created {
        Some(new) => (Some(new.replication), Some(new.exported)),
        None => (None, None),
    };
    let captured: Vec<_> = state
        .schemas
        .iter()
        .filter(|s| !ignored.contains(&s.relid))
        .cloned()
        .collect();
    let initial = if opts.snapshot && exported.is_some() {
        plan::initial_copy(opts, &client, &captured, &mut state).await?
    } else {
        plan::InitialCopy::default()
    };
    plan::chunks_again(opts, &client, &captured, &mut state).await?;
    let consistent = state.end_lsn;
    let mut pipe = Pipeline::resume(
        state,
        sink,
        Some(opts.state.clone()),
        opts.strictness(),
        &ignored,
    )
    .map_err(CdcError::Pipeline)?;
    if let Some(counters) = counters {
        pipe.report_to(counters.clone());
    }
    if let (true, Some(exported)) = (opts.snapshot, exported) {
        let at = snapshot::Exported {
            snapshot: &exported,
            consistent,
            identity_table,
        };
        snapshot::initial(
            opts,
            &mut client,
            &at,
            &initial.whole,
            &initial.in_key_order,
            &mut pipe,
        )
        .await?;
    }
    drop(client);
    Ok(Started {
        gated,
        pipe,
        ignored,
        source_database,
        seen,
    })
}
