//! The checks at start: the server, the state file, the slot (created at a consistent point,
//! with the identity schemas as of it, when there is none yet), the sink opened and checked
//! before anything is created, which tables are the sink's own, and (`--snapshot`) the
//! initial snapshot into the pipeline before the stream starts.

use std::collections::BTreeSet;

use pgwire_replication::ReplicationClient;

use super::{checks, chunk_reader, replication, slot, snapshot};
use crate::chunks::ChunkCursor;
use crate::config::{Options, SinkSpec};
use crate::connect::net::{self, Session};
use crate::counters::SharedCounters;
use crate::error::{CdcError, setup};
use crate::lsn::Lsn;
use crate::pipeline::Pipeline;
use crate::sink::{self, Sink};
use crate::state::{SnapshotState, State};

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
/// reports to `counters` when given (`--metrics`), from the snapshot on.
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
    let saved = State::load(&opts.state).map_err(CdcError::State)?;
    if let Some(state) = &saved {
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
    }
    match (
        saved.as_ref().and_then(|s| s.snapshot),
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
    if (opts.snapshot || !opts.snapshot_tables.is_empty())
        && matches!(opts.sink, SinkSpec::Nats { .. })
    {
        return Err(setup(
            "--snapshot and --snapshot-table into NATS are not built yet: a snapshot row sent \
             again after a crash is read in another chunk, under another message id, which the \
             stream would not de-duplicate. Snapshot into a JSON-lines file, or start the NATS \
             sink on a new slot without it",
        ));
    }
    if (opts.snapshot || !opts.snapshot_tables.is_empty())
        && matches!(opts.sink, SinkSpec::Postgres { .. })
    {
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
    let info = slot::released(&client, &opts.slot, opts.slot_wait).await?;
    // The sink is opened (and checked) before a slot is created, so that a refused sink
    // leaves nothing behind.
    // A buffer in the database being captured is not captured itself: its writes would come
    // back through the slot forever.
    let source_database = net::database_id(&client).await;
    let sink = sink::factory::open(opts, saved.as_ref(), source_database.as_deref(), counters)?;
    let ignored: BTreeSet<u32> = match (&opts.sink, sink.own_tables()) {
        (
            SinkSpec::Postgres { dsn, .. } | SinkSpec::Replica { dsn, .. },
            Some((database, tables)),
        ) if dsn.is_none() || (database.is_some() && database == source_database) => {
            eprintln!(
                "rowid-cdc: the sink's own tables (OIDs {tables:?}) are in the captured database: \
                 their changes are not captured"
            );
            tables.into_iter().collect()
        }
        _ => BTreeSet::new(),
    };
    let (gated, state, exported) = match (saved, info) {
        (Some(state), Some(info)) => {
            checks::slot_position(&opts.slot, info.confirmed, state.end_lsn)?;
            checks::report(&state.schemas, &ignored, opts.strict)?;
            (None, state, None)
        }
        (Some(_), None) => {
            return Err(setup(format!(
                "slot {:?} named by {} does not exist (it was dropped?): the changes since the \
                 state's position are gone; start over with a new state file and --create-slot",
                opts.slot,
                opts.state.display()
            )));
        }
        (None, Some(info)) => {
            return Err(setup(format!(
                "slot {:?} exists (plugin {}) but {} does not: the identity schemas as of its \
                 position are unknown. Give the state file that followed it, or drop the slot \
                 and start with --create-slot",
                opts.slot,
                info.plugin.unwrap_or_default(),
                opts.state.display()
            )));
        }
        (None, None) if !opts.create_slot => {
            return Err(setup(format!(
                "slot {:?} does not exist: pass --create-slot to create it",
                opts.slot
            )));
        }
        (None, None) => {
            // Checked against the catalog as it is now, before anything is created: a refusal
            // leaves no slot behind.
            checks::report(
                &checks::schemas(&client, &opts.publication).await?,
                &ignored,
                opts.strict,
            )?;
            let repl =
                ReplicationClient::connect_gated(replication::config(opts, &seen, Lsn::ZERO)?)
                    .await
                    .map_err(CdcError::Replication)?;
            let created = slot::create(repl, &mut client, &opts.slot, &opts.publication).await?;
            if let Err(e) = checks::report(&created.schemas, &ignored, opts.strict) {
                drop(created.replication);
                slot::drop(&client, &opts.slot).await?;
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
                chunks: Vec::new(),
            };
            (Some(created.replication), state, Some(created.snapshot))
        }
    };
    let mut state = state;
    let captured: Vec<_> = state
        .schemas
        .iter()
        .filter(|s| !ignored.contains(&s.relid))
        .cloned()
        .collect();
    // Every table is copied under the exported snapshot before the stream starts: those with
    // an ordered key in key order with a cursor (a kill during their copy goes on in chunks
    // while streaming), the others first, not resumable.
    let mut copied = Vec::new();
    let mut in_key_order = Vec::new();
    if opts.snapshot && exported.is_some() {
        for s in &captured {
            match chunk_reader::chunkable(&client, s, &opts.publication).await {
                Ok(()) => {
                    state.chunks.push(ChunkCursor {
                        relid: s.relid,
                        after: None,
                        done: false,
                    });
                    in_key_order.push(s.clone());
                }
                Err(why) => {
                    if opts.progress {
                        eprintln!(
                            "rowid-cdc: snapshot: {} is copied at the slot's consistent point, \
                             not resumable: {why}",
                            s.qualified_name()
                        );
                    }
                    copied.push(s.clone());
                }
            }
        }
    }
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
        if let Err(why) = chunk_reader::chunkable(&client, s, &opts.publication).await {
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
        // Added, or read again from its first row.
        state.chunks.retain(|c| c.relid != s.relid);
        state.chunks.push(ChunkCursor {
            relid: s.relid,
            after: None,
            done: false,
        });
    }
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
        pipe.snapshot_begin(copied.len())
            .map_err(CdcError::Pipeline)?;
        pause_before_copy().await;
        let (latest, _) = checks::connect(&opts.dsn).await?;
        let latest = snapshot::Latest {
            client: &latest,
            identity_table,
            slot: &opts.slot,
            state: &opts.state,
        };
        snapshot::copy(
            &mut client,
            &exported,
            &opts.publication,
            consistent,
            &copied,
            &in_key_order,
            &latest,
            &mut pipe,
            opts.progress,
            opts.snapshot_checkpoint,
        )
        .await?;
        for notice in pipe.take_notices() {
            eprintln!("rowid-cdc: notice: {notice}");
        }
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

/// For tests: `ROWID_CDC_TEST_PAUSE_BEFORE_COPY_MS` milliseconds between the slot's creation
/// and the initial copy, so that a test can commit a DDL in that window deterministically
/// (`tests/snapshot.rs`). Unset in any real run: no pause.
async fn pause_before_copy() {
    let pause = std::env::var("ROWID_CDC_TEST_PAUSE_BEFORE_COPY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = pause {
        tokio::time::sleep(std::time::Duration::from_millis(ms.min(60_000))).await;
    }
}
