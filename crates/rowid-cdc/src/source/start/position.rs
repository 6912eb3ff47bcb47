//! Where following starts: the saved state resumed on its slot, or (no state file,
//! `--create-slot`) a new slot created at a consistent point with the identity schemas as of
//! it, the published tables checked before and after so that a refusal leaves no slot.

use std::collections::BTreeSet;

use pgwire_replication::ReplicationClient;
use tokio_postgres::Client;

use crate::config::Options;
use crate::connect::net::Session;
use crate::error::{CdcError, setup};
use crate::lsn::Lsn;
use crate::source::{checks, replication, slot};
use crate::state::State;

/// Where following starts: the state, and the slot if this run created it.
pub(super) struct Position {
    /// The state following starts from.
    pub(super) state: State,
    /// `None` when the slot was resumed.
    pub(super) created: Option<NewSlot>,
}

/// A slot this run created.
pub(super) struct NewSlot {
    /// The replication connection that created it, not streaming yet.
    pub(super) replication: ReplicationClient,
    /// The snapshot it exported, valid until that connection's next command.
    pub(super) exported: String,
}

/// The saved `state` against the slot as the server has it (`info`): it must exist and not
/// have moved past the state.
pub(super) fn resume(
    opts: &Options,
    state: State,
    info: Option<slot::SlotInfo>,
    ignored: &BTreeSet<u32>,
) -> Result<Position, CdcError> {
    let Some(info) = info else {
        return Err(setup(format!(
            "slot {:?} named by {} does not exist (it was dropped?): the changes since the \
             state's position are gone; start over with a new state file and --create-slot",
            opts.slot,
            opts.state.display()
        )));
    };
    checks::slot_position(&opts.slot, info.confirmed, state.end_lsn)?;
    checks::report(&state.schemas, ignored, opts.strict)?;
    Ok(Position {
        state,
        created: None,
    })
}

/// Without a state file: the slot is created (`--create-slot`, none of that name may exist)
/// at a consistent point, with the identity schemas as of it. The published tables are
/// checked against the catalog before anything is created, and against the schemas at the
/// consistent point after: a refusal drops the new slot.
pub(super) async fn create(
    opts: &Options,
    client: &mut Client,
    seen: &Session,
    identity_table: u32,
    info: Option<slot::SlotInfo>,
    ignored: &BTreeSet<u32>,
) -> Result<Position, CdcError> {
    if let Some(info) = info {
        return Err(setup(format!(
            "slot {:?} exists (plugin {}) but {} does not: the identity schemas as of its \
             position are unknown. Give the state file that followed it, or drop the slot \
             and start with --create-slot",
            opts.slot,
            info.plugin.unwrap_or_default(),
            opts.state.display()
        )));
    }
    if !opts.create_slot {
        return Err(setup(format!(
            "slot {:?} does not exist: pass --create-slot to create it",
            opts.slot
        )));
    }
    checks::report(
        &checks::schemas(client, &opts.publication).await?,
        ignored,
        opts.strict,
    )?;
    let repl = ReplicationClient::connect_gated(replication::config(opts, seen, Lsn::ZERO)?)
        .await
        .map_err(CdcError::Replication)?;
    let created = slot::create(repl, client, &opts.slot, &opts.publication).await?;
    if let Err(e) = checks::report(&created.schemas, ignored, opts.strict) {
        drop(created.replication);
        slot::drop(client, &opts.slot).await?;
        return Err(e);
    }
    let state = State {
        slot: opts.slot.clone(),
        publication: opts.publication.clone(),
        commit_lsn: Lsn::ZERO,
        end_lsn: created.consistent,
        identity_table,
        sink: None,
        schemas: created.schemas,
        snapshot: None,
        chunks: Default::default(),
    };
    Ok(Position {
        state,
        created: Some(NewSlot {
            replication: created.replication,
            exported: created.snapshot,
        }),
    })
}
