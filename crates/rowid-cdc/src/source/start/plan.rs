//! Which tables are read from the source besides the stream, and how: with `--snapshot`, the
//! initial copy's keyless tables (whole, not resumable) and keyed ones (in key order, with a
//! chunk cursor); with `--snapshot-table` and `--repair`, tables read in chunks while
//! streaming from their first row.

use rowid_registry::schema_message::RelationSchema;
use tokio_postgres::Client;

use crate::chunks::ChunkCursor;
use crate::config::Options;
use crate::error::{CdcError, setup};
use crate::source::chunk_reader;
use crate::state::State;

/// The tables of the initial snapshot, all copied under the exported snapshot before the
/// stream starts.
#[derive(Default)]
pub(super) struct InitialCopy {
    /// Copied whole, not resumable (no ordered key to keep a cursor by), first.
    pub(super) whole: Vec<RelationSchema>,
    /// Copied in key order with a cursor: a kill during their copy goes on in chunks while
    /// streaming.
    pub(super) in_key_order: Vec<RelationSchema>,
}

/// Splits the `captured` tables for the initial copy; each one read in key order gets its
/// chunk cursor in `state`.
pub(super) async fn initial_copy(
    opts: &Options,
    client: &Client,
    captured: &[RelationSchema],
    state: &mut State,
) -> Result<InitialCopy, CdcError> {
    let mut plan = InitialCopy::default();
    for s in captured {
        match chunk_reader::chunkable(client, s, &opts.publication).await {
            Ok(()) => {
                state.chunks.cursors.push(ChunkCursor::from_start(s.relid));
                plan.in_key_order.push(s.clone());
            }
            Err(why) => {
                if opts.progress {
                    eprintln!(
                        "rowid-cdc: snapshot: {} is copied at the slot's consistent point, \
                         not resumable: {why}",
                        s.qualified_name()
                    );
                }
                plan.whole.push(s.clone());
            }
        }
    }
    Ok(plan)
}

/// `--snapshot-table` and `--repair`: each named table of the publication gets a chunk
/// cursor from its first row (added, or put back to the start), read while streaming; a
/// table the chunks cannot read is refused by name.
pub(super) async fn chunks_again(
    opts: &Options,
    client: &Client,
    captured: &[RelationSchema],
    state: &mut State,
) -> Result<(), CdcError> {
    let again = (opts.snapshot_tables.iter().map(|t| ("--snapshot-table", t)))
        .chain(opts.repair.iter().map(|t| ("--repair", t)));
    for (flag, name) in again {
        let Some(s) = captured.iter().find(|s| {
            s.qualified_name() == *name || format!("{}.{}", s.namespace, s.relname) == *name
        }) else {
            return Err(setup(format!(
                "{flag} {name}: not a table of publication {} (as schema.table)",
                opts.publication
            )));
        };
        if let Err(why) = chunk_reader::chunkable(client, s, &opts.publication).await {
            let fix = if flag == "--repair" {
                "; its storage table can only be rebuilt by starting the replica over (a new \
                 slot with --create-slot --snapshot, into an empty replica schema)"
            } else {
                ""
            };
            return Err(setup(format!(
                "{flag} {name}: cannot be read in chunks while streaming: {why}{fix}"
            )));
        }
        // Read again from its first row: what was recorded of it, a chunk delivered before its
        // watermark included, no longer routes its changes.
        state.chunks.cursors.retain(|c| c.relid != s.relid);
        state.chunks.cursors.push(ChunkCursor::from_start(s.relid));
        if state
            .chunks
            .delivered
            .as_ref()
            .is_some_and(|d| d.relid == s.relid)
        {
            state.chunks.delivered = None;
        }
    }
    Ok(())
}
