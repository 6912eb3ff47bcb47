//! IMMEDIATE stream tables (spec/stream-tables.md §5.3): the statement triggers on their
//! sources and the trigger function that applies each statement's transition tables with
//! the statement `rowid_ivm::delta::immediate_statement` rendered at create.
//!
//! The function runs only from the triggers `create_stream_table` made: the trigger must be
//! named as it named it, on a relation the catalog records as a source of that stream table,
//! so a trigger another role points at the function (on its own table, or a second one on a
//! source) is refused by name instead of feeding rows into someone else's stream table. It
//! runs as the stream table's owner, restricted, with the path locked and the refresh
//! settings pinned, after locking the storage `EXCLUSIVE`: concurrent writers of its sources
//! apply their statements one after the other, each statement reading the sources under a
//! snapshot taken after the lock (every earlier writer's maintenance committed).

use pgrx::PgTryBuilder;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::guard::{as_owner, with_pinned_settings};
use crate::immediate_statements::Apply;
use crate::{errors, spi};

const FUNCTION: &str = "pgtrickle.maintain_stream_table";

/// The name of the trigger of stream table `relid`, `depth` stream tables deep
/// ([`crate::stream_graph::depth`]), for `event` (`b`, `i`, `u`, `d`, `t`). PostgreSQL fires
/// the triggers of one event on one table in name order; the rank `9999 - depth` in front
/// makes a reader's triggers fire before those of the stream tables it reads, so a reader
/// applies a statement before its upstreams apply it (spec/stream-tables.md §5.3).
pub fn trigger_name(relid: pg_sys::Oid, depth: u32, event: char) -> String {
    format!(
        "pgtrickle_immediate_{:04}_{}_{event}",
        9999 - depth.min(9999),
        u32::from(relid)
    )
}

/// The catalog row an IMMEDIATE statement works from (one query per statement).
struct Recorded {
    delta: String,
    fill: String,
    time_zone: String,
    shape: String,
    sources: Vec<pg_sys::Oid>,
    depth: i32,
    functions: Vec<pg_sys::Oid>,
    operators: Vec<pg_sys::Oid>,
    read_columns: Vec<i16>,
}

crate::pg_function_info_v1!(pg_finfo_maintain_stream_table);

/// The trigger function `pgtrickle.maintain_stream_table(stream table OID)`: AFTER ... FOR
/// EACH STATEMENT on INSERT, UPDATE, DELETE (with transition tables) and TRUNCATE, and
/// BEFORE ... FOR EACH STATEMENT on INSERT OR UPDATE OR DELETE (counting a statement's events).
///
/// # Safety
/// Called by PostgreSQL's trigger manager with a `TriggerData` context.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn maintain_stream_table(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: a trigger call's context is a TriggerData whose relation and trigger are valid
    // for this call; the trigger's arguments are `tgnargs` NUL-terminated strings.
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
            errors::invalid_argument(FUNCTION, "is a trigger function".into());
        }
        let td = context.cast::<pg_sys::TriggerData>();
        let event = (*td).tg_event;
        let timing = event & pg_sys::TRIGGER_EVENT_TIMINGMASK;
        if (timing != pg_sys::TRIGGER_EVENT_AFTER && timing != pg_sys::TRIGGER_EVENT_BEFORE)
            || event & pg_sys::TRIGGER_EVENT_ROW != 0
        {
            errors::invalid_argument(
                FUNCTION,
                "must fire BEFORE or AFTER ... FOR EACH STATEMENT".into(),
            );
        }
        let op = match event & pg_sys::TRIGGER_EVENT_OPMASK {
            _ if timing == pg_sys::TRIGGER_EVENT_BEFORE => 'b',
            pg_sys::TRIGGER_EVENT_INSERT => 'i',
            pg_sys::TRIGGER_EVENT_UPDATE => 'u',
            pg_sys::TRIGGER_EVENT_DELETE => 'd',
            _ => 't',
        };
        let trigger = (*td).tg_trigger;
        if (*trigger).tgnargs != 1 {
            errors::invalid_argument(FUNCTION, "takes the stream table's OID".into());
        }
        let arg = std::ffi::CStr::from_ptr(*(*trigger).tgargs).to_string_lossy();
        let relid = pg_sys::Oid::from(arg.parse::<u32>().unwrap_or(0));
        let name = std::ffi::CStr::from_ptr((*trigger).tgname).to_string_lossy();
        let source = (*(*td).tg_relation).rd_id;
        // One catalog read per statement: the statements to run, what they were written for,
        // and the depth the trigger's name ranks by.
        // As the extension's owner: the writer may not see the catalog's row (its rows are
        // the stream tables' owners', spec/stream-tables.md §10.5).
        let recorded: Option<Recorded> = crate::catalog::as_extension(|| {
            spi::rows(
                &format!(
                    "SELECT i.statement, s.fill_sql, s.time_zone, s.source_shape, s.sources, {}, \
                   s.bound_functions, s.bound_operators, i.read_columns \
                 FROM pgtrickle.pgt_immediate i \
                 JOIN pgtrickle.pgt_stream_tables s \
                   ON s.pgt_relid OPERATOR(pg_catalog.=) i.pgt_relid \
                 WHERE i.pgt_relid OPERATOR(pg_catalog.=) $1 \
                   AND i.source OPERATOR(pg_catalog.=) $2 \
                   AND (i.event OPERATOR(pg_catalog.=) $3 OR $3 OPERATOR(pg_catalog.=) ANY \
                        ('{{t,b}}'::pg_catalog.text[])) \
                 LIMIT 1",
                    crate::stream_graph::depth_sql("s.sources")
                ),
                &[
                    DatumWithOid::from(relid),
                    DatumWithOid::from(source),
                    DatumWithOid::from(op.to_string().as_str()),
                ],
                |r| {
                    Ok(Recorded {
                        delta: r.get::<String>(1)?.unwrap_or_default(),
                        fill: r.get::<String>(2)?.unwrap_or_default(),
                        time_zone: r.get::<String>(3)?.unwrap_or_default(),
                        shape: r.get::<String>(4)?.unwrap_or_default(),
                        sources: r.get::<Vec<pg_sys::Oid>>(5)?.unwrap_or_default(),
                        depth: r.get::<i32>(6)?.unwrap_or(0),
                        functions: r.get::<Vec<pg_sys::Oid>>(7)?.unwrap_or_default(),
                        operators: r.get::<Vec<pg_sys::Oid>>(8)?.unwrap_or_default(),
                        read_columns: r.get::<Vec<i16>>(9)?.unwrap_or_default(),
                    })
                },
            )
        })
        .pop();
        let Some(Recorded {
            delta,
            fill,
            time_zone,
            shape,
            sources,
            depth,
            functions,
            operators,
            read_columns,
        }) = recorded
        else {
            errors::invalid_argument(
                FUNCTION,
                format!(
                    "{} is not a source of an IMMEDIATE stream table with OID {}",
                    crate::catalog::relation_name(source),
                    u32::from(relid)
                ),
            );
        };
        if u32::try_from(depth).map_or(true, |depth| name != trigger_name(relid, depth, op)) {
            errors::invalid_argument(
                FUNCTION,
                format!(
                    "the trigger {name:?} on {} is not one create_stream_table made",
                    crate::catalog::relation_name(source)
                ),
            );
        }
        // Several writes of the sources in flight at once are recomputed after the last
        // (see crate::immediate_statements): the BEFORE trigger opens an event, each AFTER
        // one closes one.
        let apply = match op {
            'i' | 'u' | 'd' | 't' => crate::immediate_statements::close(relid, op == 't'),
            _ => Apply::Delta,
        };
        let owner = crate::catalog::relation_owner(relid);
        // What FULL would need of the owner (crate::access): SELECT on what the query reads
        // of the source written, and a source whose policies apply to the owner recomputed
        // (the fill applies them; the delta would not).
        if op != 'b' {
            crate::access::check_columns(
                &crate::catalog::relation_name(relid),
                source,
                owner,
                &read_columns,
            );
        }
        let recompute = apply == Apply::Recompute
            || (op != 'b'
                && sources
                    .iter()
                    .any(|s| crate::access::row_security_applies(*s, owner)));
        let statement = if recompute { fill } else { delta };
        if crate::catalog::source_shape(relid, &sources, &functions) != shape {
            // Its statements were written for the sources' old definition: nothing is
            // applied with them (the write fails) until a refresh rebuilds it.
            errors::invalid_buffer(
                FUNCTION,
                &format!(
                    "a DDL changed the sources of the IMMEDIATE stream table {} since it was \
                     built: run pgtrickle.refresh_stream_table to rebuild it from its query",
                    crate::catalog::relation_name(relid)
                ),
            );
        }
        if op == 'b' {
            crate::immediate_statements::open(relid);
            return pg_sys::Datum::from(0);
        }
        if apply == Apply::Later {
            return pg_sys::Datum::from(0);
        }
        as_owner(owner, || {
            // Writers of the sources apply their statements one at a time.
            pg_sys::LockRelationOid(relid, pg_sys::ExclusiveLock as pg_sys::LOCKMODE);
            mark_maintained(relid);
            with_pinned_settings(&time_zone, || {
                let name = crate::catalog::relation_name(relid);
                let allowed = crate::binding::Allowed {
                    functions: functions.iter().copied().collect(),
                    operators: operators.iter().copied().collect(),
                    relations: sources.iter().copied().chain([relid]).collect(),
                };
                crate::sealed::sealed(&name, || {
                    crate::binding::bound(&name, &statement, &allowed, || {
                        spi::run_with_transition_tables(&statement, td);
                    });
                });
            });
        });
        pg_sys::Datum::from(0)
    }
}

/// Records that this transaction maintains the IMMEDIATE stream table `relid`, its storage
/// already locked `EXCLUSIVE` (spec/stream-tables.md §5.3, "Isolation"): every maintenance
/// updates the stream table's row of `pgtrickle.pgt_immediate_marks`, so a transaction
/// whose snapshot is fixed (REPEATABLE READ, SERIALIZABLE) and predates another's
/// maintenance fails here with a serialisation error, as PostgreSQL fails its update of a
/// row updated since its snapshot: its statement's change would be applied against sources
/// that lack what the other committed (a join would miss the pair). Under READ COMMITTED
/// the update finds the latest row, and the maintenance statements that follow take their
/// snapshots after it.
pub fn mark_maintained(relid: pg_sys::Oid) {
    crate::catalog::as_extension(|| {
        PgTryBuilder::new(|| {
            spi::run(
                "UPDATE pgtrickle.pgt_immediate_marks SET statements = statements + 1 \
                 WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
                &[DatumWithOid::from(relid)],
            )
        })
        // Raises at once: the caught error is not resumed from.
        .catch_when(PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE, |_| {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!(
                    "{FUNCTION}: the IMMEDIATE stream table {} was maintained by a \
                     transaction that committed after this transaction's snapshot was \
                     taken: its statement cannot be applied exactly under REPEATABLE READ or \
                     SERIALIZABLE; retry the transaction",
                    crate::catalog::relation_name(relid)
                )
            );
        })
        .execute();
    });
}
