//! What the state file and the flags refuse before anything is opened or created: a state
//! file of another slot or of an identity schema table dropped since, an interrupted copy
//! that cannot resume, a snapshot asked of a slot created without one, snapshots or repairs
//! into a sink that cannot hold them, and a replica of a publication that does not carry
//! every change of its tables.

use crate::config::{Options, SinkSpec};
use crate::error::{CdcError, setup};
use crate::state::{SnapshotState, State};

/// A state file given for this run must belong to its slot and publication and trust the
/// extension's identity schema table as it is now.
pub(super) fn check_state_file(
    opts: &Options,
    state: &State,
    identity_table: u32,
) -> Result<(), CdcError> {
    if state.slot != opts.slot || state.publication != opts.publication {
        return Err(setup(format!(
            "{} belongs to slot {:?} and publication {:?}, not {:?} and {:?}",
            opts.state.display(),
            state.slot,
            state.publication,
            opts.slot,
            opts.publication
        )));
    }
    if state.identity_table != identity_table {
        return Err(setup(format!(
            "{} trusts the identity schema table with OID {}, but the extension's is now \
             OID {identity_table} (the extension was dropped and created again): schema \
             changes in between are unknown; start over with a new state file and \
             --create-slot",
            opts.state.display(),
            state.identity_table
        )));
    }
    Ok(())
}

/// `--snapshot`, `--snapshot-table` and `--repair` against the state file and the sink: an
/// interrupted keyless copy is not restarted, a snapshot is taken only with the slot, and
/// only into a sink that can hold snapshot rows.
pub(super) fn check_snapshot_flags(opts: &Options, saved: Option<&State>) -> Result<(), CdcError> {
    match (
        saved.and_then(|s| s.snapshot),
        opts.snapshot,
        saved.is_some(),
    ) {
        (Some(SnapshotState::Pending), _, _) => {
            return Err(setup(format!(
                "the initial snapshot of slot {:?} was interrupted ({} says pending): its rows \
                 are partly delivered and the snapshot it was read under is gone. Start over: \
                 SELECT pg_drop_replication_slot('{}'); remove {} and the sink's output; run \
                 again with --create-slot --snapshot",
                opts.slot,
                opts.state.display(),
                opts.slot,
                opts.state.display()
            )));
        }
        (None, true, true) => {
            return Err(setup(format!(
                "--snapshot: slot {:?} was created without it, so the rows that existed before \
                 it are not in the output; a snapshot is taken only when the slot is created \
                 (start over with a new slot, or run without --snapshot)",
                opts.slot
            )));
        }
        _ => {}
    }
    let snapshots = opts.snapshot || !opts.snapshot_tables.is_empty();
    if snapshots && matches!(opts.sink, SinkSpec::Nats { .. }) {
        return Err(setup(
            "--snapshot and --snapshot-table into NATS are not built yet: a snapshot row sent \
             again after a crash is read in another chunk, under another message id, which the \
             stream would not de-duplicate. Snapshot into a JSON-lines file, or start the NATS \
             sink on a new slot without it",
        ));
    }
    if snapshots && matches!(opts.sink, SinkSpec::Postgres { .. }) {
        return Err(setup(
            "--snapshot and --snapshot-table write snapshot events, which a change buffer does not hold (its rows \
             are changes): use a JSON-lines sink",
        ));
    }
    if !opts.repair.is_empty() && !matches!(opts.sink, SinkSpec::Replica { .. }) {
        return Err(setup(
            "--repair rebuilds a replica's storage table: it needs --sink replica:...; to read \
             a table again into another sink, use --snapshot-table",
        ));
    }
    Ok(())
}

/// A replica needs every insert, update, delete and truncate of every row and column of its
/// tables: a publication that leaves some out (`gaps`, [`super::checks::publication_gaps`])
/// is refused for it, naming each gap and its fix. The other sinks carry what the publication
/// publishes, and are told at start what that leaves out.
pub(super) fn check_publication(opts: &Options, gaps: &[String]) -> Result<(), CdcError> {
    if gaps.is_empty() {
        return Ok(());
    }
    if matches!(opts.sink, SinkSpec::Replica { .. }) {
        return Err(setup(format!(
            "publication {:?} cannot keep a replica equal to its sources: {}",
            opts.publication,
            gaps.join("; ")
        )));
    }
    eprintln!(
        "rowid-cdc: warning: publication {:?} does not carry every change of its tables, so \
         neither does this output: {}",
        opts.publication,
        gaps.join("; ")
    );
    Ok(())
}
