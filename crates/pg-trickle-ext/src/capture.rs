//! Trigger change capture: `pgtrickle.capture_changes()` appends one row per change to the
//! source's change buffer (spec/change-buffer.md, the shape `rowid_registry::buffer` owns and
//! `rowid-cdc`'s PostgreSQL sink writes too), with the old and new identities computed
//! straight from the trigger's tuples.
//!
//! - **The trigger works as the source table's owner**, who owns its buffer, and nothing the
//!   caller controls can steer that work ([`crate::guard::as_owner`]): the user id is switched
//!   inside a security-restricted operation with `search_path` locked to `pg_catalog,
//!   pg_temp`, every statement qualifies its names, and the buffer is named by the trigger's
//!   argument but accepted only when it is the one `capture_table` made for this source
//!   ([`verify_buffer`]: in the extension's schema, owned by the source's owner, depending on
//!   the source, granting nothing but `SELECT` to others, without triggers or rules).
//! - **One identity schema per trigger, validated once and cached** (per backend): the key the
//!   registry chooses for the table (`identity_messages::relation_schema`, the rule of
//!   `validate_source_identity` and of the WAL path), each key column's reader and the checked
//!   buffer. Rebuilt on a relcache invalidation of the source, the buffer or any composite type
//!   the key's values contain (`ALTER TYPE`), also inside a transaction (at the next command).
//! - **Each row is written with the buffer locked first**: the buffer is opened with
//!   `RowExclusiveLock`, which processes pending invalidations, and only then is the plan's
//!   validity and the way in decided: straight into the heap when the buffer has no index, rule
//!   or row security (the CHECK constraints this bypasses were compared with the registry's when
//!   the plan was built), else through the executor. The heap row is built per attribute of the
//!   buffer's tuple descriptor as it is now (dropped attributes are NULL).
//! - Transaction-local `seq`, the 32-bit top-level xid, and the WAL insert position as
//!   `change_lsn`; versions written explicitly, so the buffer's CHECK constraints refuse a
//!   buffer of other versions at the first row.
//!
//! `pgtrickle.capture_table(regclass)` validates the source, creates the buffer and the two
//! triggers; `pgtrickle.check_change_buffer(regclass)` is what a reader calls before reading.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::rc::Rc;

use pgrx::PgTryBuilder;
use pgrx::pg_guard;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::CaughtError;
use rowid_codec::Domain;
use rowid_registry::buffer::{
    self, BACKFILLED, BufferOp, CatalogColumn, ImageColumn, OLD_IMAGE, OLD_ROW_ID, Side,
    UNCHANGED_TOAST, UNIDENTIFIED, Writers,
};
use rowid_registry::schema_message::IdentityDef;
use rowid_registry::sql::{QualifiedName, ROW_ID, quote_ident};

use crate::catalog::{
    attribute, attribute_name, buffer_name, composite_relations, relation_owner, row_id_domain,
};
use crate::errors;
use crate::fields::{self, Field};
use crate::guard::{as_owner, with_locked_search_path};
use crate::identity_messages::relation_schema;
use crate::sequence::{forget_mark, next_seq};
use crate::spi;

/// The trigger function, for messages.
const FUNCTION: &str = "pgtrickle.capture_changes";
/// The capture function, for messages.
const CAPTURE_TABLE: &str = "pgtrickle.capture_table";

/// The buffer's fixed columns in the order of the values the trigger writes.
const VALUE_COLUMNS: [&str; 14] = [
    "xid",
    "seq",
    "source_relid",
    "op",
    ROW_ID,
    OLD_ROW_ID,
    "commit_lsn",
    "change_lsn",
    "row_identity_version",
    "row_probe_version",
    UNIDENTIFIED,
    OLD_IMAGE,
    BACKFILLED,
    UNCHANGED_TOAST,
];

/// What one attribute of the buffer's tuple descriptor holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HeapColumn {
    /// One of [`VALUE_COLUMNS`].
    Value(usize),
    /// The new row's attribute (zero-based index in the source's descriptor).
    New(usize),
    /// The old row's attribute.
    Old(usize),
    /// A dropped attribute.
    Dropped,
}

/// What one capture trigger needs per row, built once.
struct Plan {
    relid: pg_sys::Oid,
    /// The buffer, verified when the plan was built.
    buffer: pg_sys::Oid,
    /// The buffer's name, quoted.
    buffer_name: String,
    /// Cleared by a relcache invalidation of `relid`, `buffer` or a composite key type.
    valid: Rc<Cell<bool>>,
    domain: Domain,
    fields: Vec<Field>,
    /// Zero-based attribute index of each field in the source's tuple descriptor.
    attnos: Vec<usize>,
    /// The kept `INSERT` for buffers the heap path may not write, prepared when first needed;
    /// an execution holds a clone (a nested capture may drop this plan meanwhile).
    spi: Option<Rc<spi::KeptPlan>>,
    /// Per attribute of the buffer's tuple descriptor when the plan was built (with the
    /// buffer locked): what it holds.
    heap_columns: Vec<HeapColumn>,
    /// The live buffer columns in order, with their types: the executor path's `INSERT`.
    insert_columns: Vec<(String, pg_sys::Oid, HeapColumn)>,
    /// Scratch for the heap row.
    heap_values: Vec<pg_sys::Datum>,
    heap_nulls: Vec<bool>,
    old: Vec<u8>,
    new: Vec<u8>,
}

impl Drop for Plan {
    fn drop(&mut self) {
        fields::release(&mut self.fields);
    }
}

thread_local! {
    /// Plans by trigger OID (backends are single-threaded).
    static PLANS: RefCell<HashMap<pg_sys::Oid, Plan>> = RefCell::new(HashMap::new());
    /// What the relcache callback may clear: (relation, the flag of the plan using it).
    /// Never borrowed across a call into PostgreSQL.
    static WATCH: RefCell<Vec<(pg_sys::Oid, Rc<Cell<bool>>)>> = const { RefCell::new(Vec::new()) };
    static CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// Where readers of cached plans allocate (a child of TopMemoryContext).
    static CONTEXT: Cell<pg_sys::MemoryContext> = const { Cell::new(std::ptr::null_mut()) };
}

/// The relcache callback: marks the plans that use `relid` (every plan for `InvalidOid`)
/// stale. Runs during invalidation processing: no catalog access, no allocation.
#[pg_guard]
unsafe extern "C-unwind" fn relcache_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    WATCH.with(|w| match w.try_borrow() {
        Ok(w) => {
            for (rel, valid) in w.iter() {
                if relid == pg_sys::InvalidOid || *rel == relid {
                    valid.set(false);
                }
            }
        }
        // Never expected (the list is not borrowed across calls into PostgreSQL); if it
        // were, nothing may be trusted.
        Err(_) => PLANS.with(|p| {
            if let Ok(p) = p.try_borrow() {
                for plan in p.values() {
                    plan.valid.set(false);
                }
            }
        }),
    });
}

fn memory_context() -> pg_sys::MemoryContext {
    CONTEXT.with(|c| {
        if c.get().is_null() {
            // SAFETY: a child of TopMemoryContext, created once per backend, never deleted.
            let cxt = unsafe {
                pg_sys::AllocSetContextCreateExtended(
                    pg_sys::TopMemoryContext,
                    c"pg_trickle capture".as_ptr(),
                    pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
                    pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
                    pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
                )
            };
            c.set(cxt);
        }
        c.get()
    })
}

/// A relation's name, quoted and qualified, from its OID.
fn relation_name(oid: pg_sys::Oid) -> String {
    crate::catalog::relation_name(oid)
}

/// A role's name as `regrole` prints it.
fn role_name(role: pg_sys::Oid) -> String {
    spi::one::<String>(
        &format!(
            "SELECT {}::pg_catalog.regrole::pg_catalog.text",
            u32::from(role)
        ),
        &[],
    )
    .unwrap_or_default()
}

/// The buffer's live columns.
fn buffer_columns(oid: pg_sys::Oid) -> Vec<CatalogColumn> {
    let name = relation_name(oid);
    spi::rows(buffer::SHAPE_QUERY, &[name.as_str().into()], |row| {
        Ok(CatalogColumn {
            name: row.get::<String>(1)?.unwrap_or_default(),
            sql_type: row.get::<String>(2)?.unwrap_or_default(),
            not_null: row.get::<bool>(3)?.unwrap_or(false),
            comment: row.get::<String>(4)?,
        })
    })
}

/// The source's columns as its buffer holds them (published columns in `attnum` order, with
/// their storage types), refused by `function` when a name is too long for the buffer.
fn source_images(function: &str, relid: pg_sys::Oid) -> Vec<ImageColumn> {
    let images: Vec<ImageColumn> = crate::catalog::published_columns(relid)
        .into_iter()
        .map(|c| ImageColumn {
            attnum: c.attnum,
            sql_type: spi::one::<String>(
                buffer::STORAGE_TYPE_QUERY,
                &[c.type_name.as_str().into()],
            )
            .unwrap_or(c.type_name),
            name: c.name,
        })
        .collect();
    if let Err(e) = buffer::check_image_names(&relation_name(relid), &images) {
        errors::refused(function, "0A000", &e.to_string());
    }
    images
}

/// Alters `buffer` (of `source`, verified) to hold the source's columns as they are now
/// (spec/change-buffer.md §1c), as the buffer's owner; returns the statements it ran.
fn follow_columns(function: &str, source: pg_sys::Oid, buffer: pg_sys::Oid) -> usize {
    let name = relation_name(buffer);
    let have = match buffer::check_shape(&name, &buffer_columns(buffer)) {
        Ok(have) => have,
        Err(e) => errors::invalid_buffer(function, &e.to_string()),
    };
    let want = source_images(function, source);
    let qualified = buffer_name(buffer);
    let count = buffer::alter_statements(&qualified, &have, &want, true).len();
    if count > 0 {
        let owner = relation_owner(buffer);
        // Read before: nothing may query the database between catching an error and raising.
        let source_name = relation_name(source);
        // As the buffer's owner, restricted: a cast a USING runs is the owner's to trust, not
        // the extension owner's.
        // Decided with the buffer locked and a snapshot taken then, not in the DDL's own
        // snapshot: a REPEATABLE READ transaction's snapshot can predate a change another
        // session committed into the buffer (its value would be converted as NULL).
        lock_for_ddl(function, buffer);
        let holds_rows = holds_rows(function, buffer);
        as_owner(owner, || {
            for sql in &buffer::alter_statements(&qualified, &have, &want, holds_rows) {
                PgTryBuilder::new(|| spi::run(sql, &[]))
                    // Raises at once: the caught error is not resumed from.
                    .catch_others(|caught| {
                        let report = match &caught {
                            CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r,
                            CaughtError::RustPanic { ereport, .. } => ereport,
                        };
                        let cause = report.message();
                        // Dropped columns keep their numbers: a buffer reaches the limit
                        // after enough ADD and DROP COLUMN, whatever it holds.
                        let advice = if report.sql_error_code()
                            == PgSqlErrorCode::ERRCODE_TOO_MANY_COLUMNS
                        {
                            format!(
                                "PostgreSQL counts the columns dropped from the buffer too, \
                                 two for every source column it followed: consume its \
                                 changes, drop the buffer and run \
                                 pgtrickle.capture_table('{source_name}') again"
                            )
                        } else {
                            "the buffer holds changes with the columns' old types, which are \
                             kept: consume them (or empty the buffer) and run the DDL again"
                                .to_string()
                        };
                        errors::invalid_buffer(
                            function,
                            &format!(
                                "cannot follow the DDL of {source_name} in its change buffer \
                                 {name} ({cause}); {advice}"
                            ),
                        )
                    })
                    .execute();
            }
        });
    }
    count
}

/// Locks the buffer `oid` `ACCESS EXCLUSIVE` for its DDL (what its `ALTER TABLE` takes). A
/// session holding a lock on it without the right to read it is refused at once, by process
/// and role: every source owner and capture role has USAGE on the buffers' schema, and with
/// USAGE alone `PREPARE ... SELECT` locks a table at parse time, before the permission
/// check, for as long as its transaction stays open (issue 36 item 9). Waiting would hold the
/// source's DDL, and every writer of the source queued behind it, for as long as that role
/// chose. A session that may read the buffer is waited for, as any ALTER TABLE waits.
fn lock_for_ddl(function: &str, oid: pg_sys::Oid) {
    // SAFETY: a lock on a relation OID, held until the transaction ends.
    if unsafe { pg_sys::ConditionalLockRelationOid(oid, pg_sys::AccessExclusiveLock as i32) } {
        return;
    }
    let holders = spi::rows(
        "SELECT pg_catalog.format('process %s (role %s)', l.pid, \
                  pg_catalog.quote_ident(r.rolname)) \
         FROM pg_catalog.pg_locks l \
         JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid \
         JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.usesysid \
         WHERE l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.granted \
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d \
               WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) \
           AND l.relation OPERATOR(pg_catalog.=) $1 \
           AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() \
           AND NOT pg_catalog.has_table_privilege(a.usesysid, $1, 'SELECT') \
         ORDER BY l.pid",
        &[oid.into()],
        |row| Ok(row.get::<String>(1)?.unwrap_or_default()),
    );
    if !holders.is_empty() {
        errors::lock_held(
            function,
            &format!(
                "{} holds a lock on the change buffer {} without the right to read it (a \
                 statement prepared in an open transaction), which its DDL would wait on: end \
                 that session (pg_terminate_backend), or revoke the role's USAGE on schema \
                 pgtrickle_changes, then run the DDL again",
                holders.join(", "),
                relation_name(oid)
            ),
        );
    }
    // SAFETY: as above; waits for the readers holding it.
    unsafe { pg_sys::LockRelationOid(oid, pg_sys::AccessExclusiveLock as i32) };
}

/// Whether the buffer `oid` holds any row: read after locking it `ACCESS EXCLUSIVE` (the
/// lock its `ALTER TABLE` takes anyway: every transaction that wrote it has ended) with the
/// latest snapshot (which sees what they committed, and this transaction's own rows), not
/// the transaction's snapshot.
fn holds_rows(function: &str, oid: pg_sys::Oid) -> bool {
    // SAFETY: table_open raises for a missing relation; the scan is the heap AM's own, on a
    // relation checked to be a heap; the snapshot is registered for the scan's life.
    unsafe {
        let rel = pg_sys::table_open(oid, pg_sys::AccessExclusiveLock as i32);
        if (*(*rel).rd_rel).relam != pg_sys::HEAP_TABLE_AM_OID {
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            errors::invalid_buffer(
                function,
                &format!("{} is refused: it is not a heap table", relation_name(oid)),
            );
        }
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let scan = pg_sys::heap_beginscan(
            rel,
            snapshot,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            pg_sys::ScanOptions::SO_TYPE_SEQSCAN | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE,
        );
        let found =
            !pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection).is_null();
        pg_sys::heap_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        found
    }
}

/// Follows the DDL of `sources` in their trigger buffers (those that have one): what the
/// extension's `ddl_command_end` event trigger calls for every table an `ALTER TABLE`
/// touched. Returns how many buffers it altered.
pub fn follow_source_ddl(sources: &[pg_sys::Oid]) -> i32 {
    let mut altered = 0;
    for &source in sources {
        // Found by its dependency, not its name: a table someone else placed under the
        // buffer's name is no buffer and stops no DDL.
        let Some(buffer) = made_buffer(source) else {
            continue;
        };
        verify_made_for("pgtrickle.follow_source_ddl", buffer, source);
        // ALTER TABLE ... OWNER TO: the new owner gets the buffer in the same transaction
        // (the trigger writes as the source's owner, and the old one must no longer be able
        // to edit pending changes).
        give_to_source_owner(buffer, source);
        if follow_columns("pgtrickle.follow_source_ddl", source, buffer) > 0 {
            altered += 1;
        }
        crate::redefinition::mark(source, buffer);
    }
    altered
}

/// Gives `buffer` (verified as made for `source`) to the source's owner when another role
/// owns it, as the extension's owner (the right to give away objects of its schema), with
/// `USAGE` on the schema for the new owner.
fn give_to_source_owner(buffer: pg_sys::Oid, source: pg_sys::Oid) {
    let owner = role_name(relation_owner(source));
    if writers(buffer).owner == owner {
        return;
    }
    let quoted = buffer_name(buffer).quoted();
    lock_for_ddl("pgtrickle.follow_source_ddl", buffer);
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(&format!("ALTER TABLE {quoted} OWNER TO {owner}"), &[]);
        spi::run(
            &format!(
                "GRANT USAGE ON SCHEMA {} TO {owner}",
                quote_ident(buffer::DEFAULT_SCHEMA)
            ),
            &[],
        );
    });
}

/// Who can write the table, and whether writing it runs code ([`buffer::WRITERS_QUERY`]).
pub(crate) fn writers(oid: pg_sys::Oid) -> Writers {
    let name = relation_name(oid);
    spi::rows(buffer::WRITERS_QUERY, &[name.as_str().into()], |row| {
        Ok(Writers {
            owner: row.get::<String>(1)?.unwrap_or_default(),
            kind: row.get::<String>(2)?.unwrap_or_default(),
            persistence: row.get::<String>(3)?.unwrap_or_default(),
            grants: row.get::<String>(4)?,
            triggers: row.get::<String>(5)?,
            rules: row.get::<bool>(6)?.unwrap_or(false),
            row_security: row.get::<bool>(7)?.unwrap_or(false),
            code: row.get::<String>(8)?,
            access_method: row.get::<String>(9)?,
        })
    })
    .pop()
    .unwrap_or_default()
}

/// The OID of the extension's own `pgtrickle_changes` schema (created by its install script,
/// so no other role can have created it first).
fn changes_schema() -> pg_sys::Oid {
    spi::one::<pg_sys::Oid>(
        "SELECT n.oid FROM pg_catalog.pg_namespace n \
         JOIN pg_catalog.pg_depend d \
           ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass \
          AND d.objid OPERATOR(pg_catalog.=) n.oid \
          AND d.deptype OPERATOR(pg_catalog.=) 'e' \
         JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1 \
           AND e.extname OPERATOR(pg_catalog.=) 'pg_trickle_ext'",
        &[buffer::DEFAULT_SCHEMA.into()],
    )
    .unwrap_or_else(|| {
        errors::invalid_buffer(
            CAPTURE_TABLE,
            &format!(
                "schema {} does not belong to the extension pg_trickle_ext (reinstall it)",
                buffer::DEFAULT_SCHEMA
            ),
        )
    })
}

/// The facts of a source relation that decide whether it can be captured by trigger.
struct Source {
    name: String,
    kind: String,
    persistence: String,
    owner: pg_sys::Oid,
    /// Inheritance children (their rows fire their own triggers, not the source's).
    children: Option<String>,
    /// The caller has the privileges of the owner.
    callers: bool,
}

fn source(rel: pg_sys::Oid) -> Source {
    let oid = u32::from(rel);
    spi::rows(
        &format!(
            "SELECT c.relkind::pg_catalog.text, c.relpersistence::pg_catalog.text, c.relowner, \
                    (SELECT pg_catalog.string_agg(i.inhrelid::pg_catalog.regclass::pg_catalog.text, \
                            ', ' ORDER BY i.inhrelid) \
                     FROM pg_catalog.pg_inherits i WHERE i.inhparent OPERATOR(pg_catalog.=) c.oid), \
                    pg_catalog.pg_has_role(c.relowner, 'USAGE') \
             FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) {oid}"
        ),
        &[],
        |row| {
            Ok(Source {
                name: String::new(),
                kind: row.get::<String>(1)?.unwrap_or_default(),
                persistence: row.get::<String>(2)?.unwrap_or_default(),
                owner: row.get::<pg_sys::Oid>(3)?.unwrap_or(pg_sys::InvalidOid),
                children: row.get::<String>(4)?,
                callers: row.get::<bool>(5)?.unwrap_or(false),
            })
        },
    )
    .pop()
    .map(|s| Source {
        name: relation_name(rel),
        ..s
    })
    .unwrap_or_else(|| {
        errors::invalid_argument(CAPTURE_TABLE, format!("OID {oid} is not a table"))
    })
}

/// Refuses a source the trigger cannot capture exactly, by name.
fn check_source(function: &str, s: &Source) {
    let refuse = |why: &str| errors::refused(function, "0A000", &format!("{}: {why}", s.name));
    match s.kind.as_str() {
        "r" => {}
        "p" => refuse(
            "is partitioned: a trigger on the partitioned table does not see TRUNCATE of a \
             partition, and each partition's rows are its own; capture each partition",
        ),
        _ => refuse("is not an ordinary table"),
    }
    match s.persistence.as_str() {
        "p" => {}
        "u" => refuse("is unlogged: its rows vanish in a crash, and its changes with them"),
        _ => refuse("is temporary: other sessions cannot see it"),
    }
    if let Some(children) = &s.children {
        refuse(&format!(
            "has inheritance children ({children}) whose rows this trigger does not see: \
             capture each of them"
        ));
    }
}

/// Accepts `buffer` as the change buffer of `source` only when it is the one `capture_table`
/// makes ([`verify_made_for`]), owned by the source's owner, granting nothing but `SELECT` to
/// anyone else, without triggers or rules, of the buffer shape, with this library's version
/// constraints. Raised by `function` otherwise. Returns the source columns the buffer holds.
fn verify_buffer(
    function: &str,
    buffer: pg_sys::Oid,
    source: pg_sys::Oid,
    owner: pg_sys::Oid,
) -> Vec<ImageColumn> {
    verify_made_for(function, buffer, source);
    let name = relation_name(buffer);
    if let Err(e) = buffer::check_writers(&name, &writers(buffer), &role_name(owner)) {
        errors::invalid_buffer(
            function,
            &format!(
                "{e} (after ALTER TABLE ... OWNER TO, run pgtrickle.capture_table again to give \
                 the buffer to the new owner)"
            ),
        );
    }
    let images = match buffer::check_shape(&name, &buffer_columns(buffer)) {
        Ok(images) => images,
        Err(e) => errors::invalid_buffer(function, &e.to_string()),
    };
    let defs = spi::rows(buffer::CONSTRAINTS_QUERY, &[name.as_str().into()], |row| {
        Ok(row.get::<String>(1)?.unwrap_or_default())
    });
    if let Err(e) = buffer::check_version_constraints(&name, &defs) {
        errors::invalid_buffer(function, &e.to_string());
    }
    images
}

/// Accepts `buffer` only when `capture_table` made it for `source`: it lives in the
/// extension's schema (which no other role can have created first) and depends on the
/// source (so dropping the source drops it, and a new table that reuses the OID cannot adopt
/// it).
fn verify_made_for(function: &str, buffer: pg_sys::Oid, source: pg_sys::Oid) {
    let name = relation_name(buffer);
    let schema = spi::one::<pg_sys::Oid>(
        &format!(
            "SELECT relnamespace FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) {}",
            u32::from(buffer)
        ),
        &[],
    );
    if schema != Some(changes_schema()) {
        errors::invalid_buffer(
            function,
            &format!(
                "{name} is refused: change buffers live in the extension's schema {}",
                buffer::DEFAULT_SCHEMA
            ),
        );
    }
    let depends = spi::one::<bool>(
        &format!(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_depend \
             WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND objid OPERATOR(pg_catalog.=) {} \
               AND refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND refobjid OPERATOR(pg_catalog.=) {} \
               AND deptype OPERATOR(pg_catalog.=) 'a')",
            u32::from(buffer),
            u32::from(source)
        ),
        &[],
    );
    if depends != Some(true) {
        errors::invalid_buffer(
            function,
            &format!(
                "{name} is refused: it was not made by pgtrickle.capture_table for {} (it does \
                 not depend on it); drop it and capture the table again",
                relation_name(source)
            ),
        );
    }
}

/// The capture triggers `capture_table` makes on a source, as `pg_trigger` records them:
/// `(name, tgtype, tgenabled)`, each AFTER, enabled ALWAYS (so a session in
/// `session_replication_role = replica`, a subscription's apply worker among them, fires
/// them too), without `WHEN` or `UPDATE OF`, with the buffer as its one argument.
const CAPTURE_TRIGGERS: [(&str, i32, &str); 2] = [
    // ROW | INSERT | DELETE | UPDATE
    ("pgtrickle_capture", 1 | 4 | 8 | 16, "A"),
    // TRUNCATE, FOR EACH STATEMENT
    ("pgtrickle_capture_truncate", 32, "A"),
];

/// Refuses `source` (by `function`) unless the triggers that run the capture function (or,
/// built with the `bench` feature, its floor `bench_capture_floor`) on it
/// are exactly [`CAPTURE_TRIGGERS`] writing into `buffer` (quoted): a role with `TRIGGER` on
/// the source can replace one (`CREATE OR REPLACE TRIGGER ... WHEN (false)`: no change is
/// captured) or add another (every change twice). Checked by the trigger when it builds its
/// plan and by readers before they read.
fn check_capture_triggers(function: &str, source: pg_sys::Oid, buffer: pg_sys::Oid) {
    let found = spi::rows(
        &format!(
            "SELECT t.tgname::pg_catalog.text, t.tgtype::pg_catalog.int4, \
                    t.tgenabled::pg_catalog.text, t.tgqual IS NOT NULL, \
                    pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]), \
                    t.tgnargs OPERATOR(pg_catalog.=) 1 AND pg_catalog.to_regclass( \
                      pg_catalog.convert_from(pg_catalog.substring(t.tgargs, 1, \
                        pg_catalog.length(t.tgargs) OPERATOR(pg_catalog.-) 1), \
                        pg_catalog.getdatabaseencoding()::pg_catalog.name)) \
                      IS NOT DISTINCT FROM {}::pg_catalog.regclass \
             FROM pg_catalog.pg_trigger t \
             WHERE t.tgrelid OPERATOR(pg_catalog.=) {} \
               AND t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[ \
                   pg_catalog.to_regprocedure('pgtrickle.capture_changes()'), \
                   pg_catalog.to_regprocedure('pgtrickle.bench_capture_floor()')]::pg_catalog.oid[]) \
             ORDER BY t.tgname",
            u32::from(buffer),
            u32::from(source)
        ),
        &[],
        |row| {
            Ok((
                row.get::<String>(1)?.unwrap_or_default(),
                row.get::<i32>(2)?.unwrap_or(0),
                row.get::<String>(3)?.unwrap_or_default(),
                row.get::<bool>(4)?.unwrap_or(true),
                row.get::<i32>(5)?.unwrap_or(0),
                row.get::<bool>(6)?.unwrap_or(false),
            ))
        },
    );
    let source_name = relation_name(source);
    let buffer = relation_name(buffer);
    let refuse = |what: String| -> ! {
        errors::invalid_buffer(
            function,
            &format!(
                "{source_name}: {what}: its changes may be missing or doubled in {buffer}; run \
                 SELECT pgtrickle.capture_table('{}') to restore the capture triggers",
                source_name.replace('\'', "''")
            ),
        )
    };
    for (name, tgtype, enabled, qual, attrs, into_buffer) in &found {
        let Some(&(_, want_type, want_enabled)) =
            CAPTURE_TRIGGERS.iter().find(|(n, _, _)| n == name)
        else {
            refuse(format!(
                "the trigger {} runs the capture too (drop it)",
                quote_ident(name)
            ));
        };
        let wrong = if *qual {
            Some("it has a WHEN condition")
        } else if *attrs > 0 {
            Some("it fires for UPDATE OF some columns only")
        } else if *tgtype != want_type {
            Some("it fires on other events")
        } else if enabled != want_enabled {
            Some("it is not enabled ALWAYS")
        } else if !into_buffer {
            Some("it writes another buffer")
        } else {
            None
        };
        if let Some(wrong) = wrong {
            refuse(format!(
                "its capture trigger {name} is not the one capture_table made ({wrong})"
            ));
        }
    }
    for (name, _, _) in CAPTURE_TRIGGERS {
        if !found.iter().any(|f| f.0 == name) {
            refuse(format!("its capture trigger {name} is missing"));
        }
    }
}

/// The key (or keyless) identity of `relid` as its identity schema says, refused by name
/// when it has none.
fn identity_of(function: &str, relid: pg_sys::Oid) -> IdentityDef {
    let schema = relation_schema(relid);
    match &schema.identity {
        Ok(def) => def.clone(),
        Err(refusal) => errors::refused(
            function,
            &refusal.sqlstate,
            &format!("{}: {}", schema.qualified_name(), refusal.message),
        ),
    }
}

/// Builds the plan of a trigger on `relation` writing into `buffer` (`buffer_rel`, open and
/// locked), after verifying both.
///
/// # Safety
/// Must run inside a backend, in a trigger call on `relation`, as the source's owner;
/// `buffer_rel` is `buffer`, open.
unsafe fn build(
    relation: pg_sys::Relation,
    buffer: pg_sys::Oid,
    buffer_rel: pg_sys::Relation,
    valid: Rc<Cell<bool>>,
) -> Plan {
    // SAFETY: the trigger's open relation; rd_att is its tuple descriptor.
    let (relid, tupdesc, owner) = unsafe {
        (
            (*relation).rd_id,
            (*relation).rd_att,
            (*(*relation).rd_rel).relowner,
        )
    };
    // Watched before anything is read: an invalidation of the source or the buffer that
    // arrives while the plan is built (its catalog reads process them) marks it stale, and
    // the caller builds it again, instead of keeping what was read before it.
    WATCH.with(|w| {
        let mut w = w.borrow_mut();
        w.retain(|(_, v)| Rc::strong_count(v) > 1);
        w.push((relid, valid.clone()));
        w.push((buffer, valid.clone()));
    });
    check_source(FUNCTION, &source(relid));
    let def = identity_of(FUNCTION, relid);
    let buffer_name = relation_name(buffer);
    let images = verify_buffer(FUNCTION, buffer, relid, owner);
    check_capture_triggers(FUNCTION, relid, buffer);
    // An identity redefined with no event the DDL trigger follows (a key index dropped) is
    // marked before the first change under it.
    crate::redefinition::mark(relid, buffer);
    // The event trigger follows every ALTER TABLE in its own transaction; a buffer behind its
    // source (event triggers off) is refused, never written under the old shape.
    if images != source_images(FUNCTION, relid) {
        errors::invalid_buffer(
            FUNCTION,
            &format!(
                "{buffer_name} does not hold the columns {} has now (a DDL was not followed: \
                 event triggers off?); run SELECT pgtrickle.capture_table('{}') to follow it",
                relation_name(relid),
                relation_name(relid).replace('\'', "''")
            ),
        );
    }
    // SAFETY: a valid tuple descriptor with natts attributes.
    let natts = unsafe { (*tupdesc).natts } as usize;
    let mut by_name = HashMap::new();
    for i in 0..natts {
        // SAFETY: i < natts.
        let att = unsafe { attribute(tupdesc, i) };
        if !att.attisdropped {
            by_name.insert(attribute_name(att), (i, att.atttypid));
        }
    }
    let row_id = row_id_domain();
    let mcxt = memory_context();
    // Released if a later step raises (the plan is not built).
    let mut fields = fields::Resolving::with_capacity(def.fields.len());
    let mut attnos = Vec::with_capacity(def.fields.len());
    let mut composites = Vec::new();
    for f in &def.fields {
        let Some(&(i, typid)) = by_name.get(&f.column) else {
            errors::invalid_argument(
                FUNCTION,
                format!(
                    "identity column {:?} is not a column of the table",
                    f.column
                ),
            );
        };
        // SAFETY: the shape is the registry's for this column's type; mcxt lives for the
        // backend.
        fields.push(unsafe { fields::from_shape(f.column.clone(), typid, &f.shape, row_id, mcxt) });
        attnos.push(i);
        composites.extend(composite_relations(typid));
    }
    WATCH.with(|w| {
        let mut w = w.borrow_mut();
        for rel in composites {
            w.push((rel, valid.clone()));
        }
    });
    // SAFETY: the open buffer's descriptor, valid while it is open; the source's descriptor.
    let heap_columns =
        unsafe { heap_columns(&buffer_name, (*buffer_rel).rd_att, tupdesc, &images) };
    // SAFETY: as above.
    let insert_columns = unsafe { insert_columns((*buffer_rel).rd_att, &heap_columns) };
    Plan {
        relid,
        buffer,
        buffer_name,
        valid,
        domain: def.domain,
        fields: fields.finish(),
        attnos,
        spi: None,
        heap_values: Vec::with_capacity(heap_columns.len()),
        heap_nulls: Vec::with_capacity(heap_columns.len()),
        heap_columns,
        insert_columns,
        old: Vec::new(),
        new: Vec::new(),
    }
}

/// What each attribute of the buffer's descriptor `tupdesc` holds, the image columns mapped
/// to the attributes of the source's descriptor `source` through `images` (the buffer's
/// checked shape). A live attribute that is neither, or an image column whose type is not
/// its source column's storage type, is refused (the shape check has already refused such a
/// buffer; this is the heap path's own guard).
///
/// # Safety
/// `tupdesc` and `source` must be valid tuple descriptors.
unsafe fn heap_columns(
    buffer: &str,
    tupdesc: pg_sys::TupleDesc,
    source: pg_sys::TupleDesc,
    images: &[ImageColumn],
) -> Vec<HeapColumn> {
    // SAFETY: guaranteed by the caller; i < natts.
    let (natts, source_natts) = unsafe { ((*tupdesc).natts as usize, (*source).natts as usize) };
    (0..natts)
        .map(|i| {
            // SAFETY: i < natts.
            let att = unsafe { attribute(tupdesc, i) };
            if att.attisdropped {
                return HeapColumn::Dropped;
            }
            let column = attribute_name(att);
            if let Some(k) = VALUE_COLUMNS.iter().position(|c| *c == column) {
                return HeapColumn::Value(k);
            }
            let image = images.iter().find_map(|c| {
                if c.column(Side::New) == column {
                    Some((c, Side::New))
                } else if c.column(Side::Old) == column {
                    Some((c, Side::Old))
                } else {
                    None
                }
            });
            let Some((c, side)) = image else {
                errors::invalid_buffer(
                    FUNCTION,
                    &format!("{buffer} is not a change buffer: it has a column {column:?}"),
                );
            };
            let index = usize::try_from(c.attnum - 1).unwrap_or(usize::MAX);
            if index >= source_natts {
                errors::invalid_buffer(
                    FUNCTION,
                    &format!("{buffer}: column {column:?} names no column of its source"),
                );
            }
            // SAFETY: index < source_natts.
            let source_att = unsafe { attribute(source, index) };
            // SAFETY: a type OID from a live attribute.
            let storage = unsafe { pg_sys::getBaseType(source_att.atttypid) };
            if source_att.attisdropped || storage != att.atttypid {
                errors::invalid_buffer(
                    FUNCTION,
                    &format!(
                        "{buffer}: column {column:?} is not of its source column's type \
                         (run pgtrickle.capture_table again to follow the DDL)"
                    ),
                );
            }
            match side {
                Side::New => HeapColumn::New(index),
                Side::Old => HeapColumn::Old(index),
            }
        })
        .collect()
}

/// The live buffer columns with their types, for the executor path's `INSERT`.
///
/// # Safety
/// `tupdesc` must be the valid descriptor `heap_columns` was built from.
unsafe fn insert_columns(
    tupdesc: pg_sys::TupleDesc,
    heap_columns: &[HeapColumn],
) -> Vec<(String, pg_sys::Oid, HeapColumn)> {
    heap_columns
        .iter()
        .enumerate()
        .filter(|(_, h)| **h != HeapColumn::Dropped)
        .map(|(i, h)| {
            // SAFETY: i < natts (one entry per attribute).
            let att = unsafe { attribute(tupdesc, i) };
            (attribute_name(att), att.atttypid, *h)
        })
        .collect()
}

/// The kept `INSERT` into the buffer: every live column (`columns`), commit_lsn NULL (a
/// trigger runs before its commit).
fn prepare_insert(buffer: &str, columns: &[(String, pg_sys::Oid, HeapColumn)]) -> spi::KeptPlan {
    let names: Vec<String> = columns.iter().map(|(c, _, _)| quote_ident(c)).collect();
    let params: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
    let types: Vec<pg_sys::Oid> = columns.iter().map(|(_, t, _)| *t).collect();
    let sql = format!(
        "INSERT INTO {buffer} ({}) VALUES ({})",
        names.join(", "),
        params.join(", ")
    );
    let Ok(sql) = CString::new(sql) else {
        errors::invalid_argument(FUNCTION, "buffer name with a NUL byte".into());
    };
    spi::prepare_kept(&sql, &types).unwrap_or_else(|| {
        errors::invalid_argument(FUNCTION, "cannot prepare the buffer insert".into())
    })
}

/// The buffer a trigger writes: its one argument, a relation name resolved under the locked
/// search path.
///
/// # Safety
/// `trigger` must be the trigger of the current call.
unsafe fn trigger_buffer(trigger: *const pg_sys::Trigger) -> pg_sys::Oid {
    // SAFETY: tgargs holds tgnargs NUL-terminated strings.
    let name = unsafe {
        if (*trigger).tgnargs != 1 {
            errors::invalid_argument(
                FUNCTION,
                "takes one argument: the change buffer (pgtrickle.capture_table creates both)"
                    .into(),
            );
        }
        CStr::from_ptr(*(*trigger).tgargs)
            .to_string_lossy()
            .into_owned()
    };
    spi::one::<pg_sys::Oid>(
        "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid",
        &[name.as_str().into()],
    )
    .unwrap_or_else(|| {
        errors::invalid_argument(FUNCTION, format!("change buffer {name:?} does not exist"))
    })
}

/// Encodes the identity of `tuple` into `out`.
///
/// # Safety
/// `tuple` is a tuple of the relation whose descriptor is `tupdesc`, for which `plan` was
/// built.
unsafe fn identity(
    plan_fields: &[Field],
    attnos: &[usize],
    domain: Domain,
    tupdesc: pg_sys::TupleDesc,
    tuple: pg_sys::HeapTuple,
    out: &mut Vec<u8>,
) {
    // SAFETY: heap_getattr on a valid tuple of this descriptor, attribute numbers 1-based;
    // each non-NULL datum is of the column's type, for which its reader was built.
    unsafe {
        fields::encode_into(FUNCTION, out, domain, plan_fields, |i| {
            let mut null = false;
            let d = pg_sys::heap_getattr(tuple, attnos[i] as i32 + 1, tupdesc, &mut null);
            (d, null)
        });
    }
}

crate::pg_function_info_v1!(pg_finfo_capture_changes);

/// The trigger function `pgtrickle.capture_changes(buffer)`: AFTER ROW for INSERT, UPDATE and
/// DELETE, AFTER STATEMENT for TRUNCATE.
///
/// # Safety
/// Called by PostgreSQL's trigger manager with a `TriggerData` context.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn capture_changes(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: guaranteed by the caller.
    unsafe { capture(fcinfo, Identities::Encode) }
}

/// What a capture trigger writes as identities.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Identities {
    /// The rows' identities (capture_changes).
    Encode,
    /// One fixed identity for every row: the same row without computing any identity, the
    /// benchmark's floor.
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
    Fixed,
}

#[cfg(feature = "bench")]
crate::pg_function_info_v1!(pg_finfo_bench_capture_floor);

/// Benchmark floor (feature `bench`): the capture trigger's work with one fixed identity
/// instead of computing any.
///
/// # Safety
/// As [`capture_changes`].
#[cfg(feature = "bench")]
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn bench_capture_floor(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: guaranteed by the caller.
    unsafe { capture(fcinfo, Identities::Fixed) }
}

/// One change: the buffer's fixed columns, in [`VALUE_COLUMNS`] order, and the rows whose
/// attributes fill the image columns.
struct Row {
    values: [pg_sys::Datum; 14],
    nulls: [bool; 14],
    /// The source's descriptor.
    tupdesc: pg_sys::TupleDesc,
    old: Option<pg_sys::HeapTuple>,
    new: Option<pg_sys::HeapTuple>,
}

impl Row {
    /// The value of the buffer attribute `column` holds.
    ///
    /// # Safety
    /// The tuples are valid tuples of `tupdesc`, and an image column's index is an attribute
    /// of it.
    unsafe fn value(&self, column: HeapColumn) -> (pg_sys::Datum, bool) {
        let image = |tuple: Option<pg_sys::HeapTuple>, index: usize| match tuple {
            Some(t) => {
                let mut null = false;
                // SAFETY: guaranteed by the caller; attribute numbers are 1-based.
                let d =
                    unsafe { pg_sys::heap_getattr(t, index as i32 + 1, self.tupdesc, &mut null) };
                (d, null)
            }
            None => (pg_sys::Datum::from(0), true),
        };
        match column {
            HeapColumn::Value(k) => (self.values[k], self.nulls[k]),
            HeapColumn::New(i) => image(self.new, i),
            HeapColumn::Old(i) => image(self.old, i),
            HeapColumn::Dropped => (pg_sys::Datum::from(0), true),
        }
    }
}

/// The body of the capture triggers.
///
/// # Safety
/// As [`capture_changes`].
unsafe fn capture(fcinfo: pg_sys::FunctionCallInfo, identities: Identities) -> pg_sys::Datum {
    // SAFETY: a trigger call's context is a TriggerData whose relation, trigger and tuples
    // are valid for this call.
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
            errors::invalid_argument(FUNCTION, "is a trigger function".into());
        }
        let td = &*context.cast::<pg_sys::TriggerData>();
        let event = td.tg_event;
        if event & pg_sys::TRIGGER_EVENT_TIMINGMASK != pg_sys::TRIGGER_EVENT_AFTER {
            errors::invalid_argument(FUNCTION, "must be an AFTER trigger".into());
        }
        let op = match event & pg_sys::TRIGGER_EVENT_OPMASK {
            pg_sys::TRIGGER_EVENT_INSERT => BufferOp::Insert,
            pg_sys::TRIGGER_EVENT_UPDATE => BufferOp::Update,
            pg_sys::TRIGGER_EVENT_DELETE => BufferOp::Delete,
            _ => BufferOp::Truncate,
        };
        let row_level = event & pg_sys::TRIGGER_EVENT_ROW != 0;
        if row_level == (op == BufferOp::Truncate) {
            errors::invalid_argument(
                FUNCTION,
                "must fire FOR EACH ROW on INSERT, UPDATE and DELETE, FOR EACH STATEMENT on \
                 TRUNCATE"
                    .into(),
            );
        }
        if !CALLBACK.with(Cell::get) {
            pg_sys::CacheRegisterRelcacheCallback(Some(relcache_changed), pg_sys::Datum::from(0));
            CALLBACK.with(|c| c.set(true));
        }
        let relation = td.tg_relation;
        let owner = (*(*relation).rd_rel).relowner;
        // Everything from here runs as the source's owner, restricted, with the locked path.
        as_owner(owner, || capture_as_owner(td, op, identities))
    }
}

/// [`capture`] once the user id is the source's owner.
///
/// # Safety
/// As [`capture_changes`].
unsafe fn capture_as_owner(
    td: &pg_sys::TriggerData,
    op: BufferOp,
    identities: Identities,
) -> pg_sys::Datum {
    // SAFETY: as in `capture`.
    unsafe {
        let trigger = td.tg_trigger;
        let tgoid = (*trigger).tgoid;
        let relation = td.tg_relation;
        // The buffer is locked before anything is decided: acquiring the lock processes the
        // invalidations another session's committed DDL on it sent (an index added, a
        // constraint changed), which mark the plan stale.
        let mut buffer = PLANS
            .with(|p| p.borrow().get(&tgoid).map(|plan| plan.buffer))
            .unwrap_or_else(|| trigger_buffer(trigger));
        let mut rel = open_buffer(buffer);
        let mut attempts = 0;
        loop {
            let stale = PLANS.with(|p| p.borrow().get(&tgoid).is_none_or(|plan| !plan.valid.get()));
            if !stale && !rel.is_null() {
                break;
            }
            attempts += 1;
            if attempts > 3 {
                errors::invalid_buffer(
                    FUNCTION,
                    "the change buffer keeps changing under the trigger",
                );
            }
            // Dropped first: its reader memory and kept plan go before the new ones.
            PLANS.with(|p| p.borrow_mut().remove(&tgoid));
            let named = trigger_buffer(trigger);
            if named != buffer || rel.is_null() {
                if !rel.is_null() {
                    pg_sys::table_close(rel, pg_sys::NoLock as i32);
                }
                buffer = named;
                rel = open_buffer(buffer);
                if rel.is_null() {
                    continue;
                }
            }
            // Plans made stale by an invalidation are dropped here, this trigger's and any
            // other's: a dropped trigger's plan (its source's relcache was invalidated) would
            // otherwise stay for the backend's life. A plan still executing elsewhere keeps
            // its kept INSERT (held by that execution); its readers are not in use then.
            PLANS.with(|p| p.borrow_mut().retain(|_, plan| plan.valid.get()));
            let valid = Rc::new(Cell::new(true));
            let plan = build(relation, buffer, rel, valid);
            PLANS.with(|p| p.borrow_mut().insert(tgoid, plan));
        }
        let tupdesc = (*relation).rd_att;
        let (xid, seq) = next_seq();
        forget_mark((*relation).rd_id);
        let lsn = pg_sys::GetXLogInsertRecPtr();
        // The identities are encoded with the plan borrowed, then the insert runs with it
        // released (the insert can process invalidations, which must find nothing borrowed).
        let (old_tuple, new_tuple) = match op {
            BufferOp::Insert => (None, Some(td.tg_trigtuple)),
            BufferOp::Update => (Some(td.tg_trigtuple), Some(td.tg_newtuple)),
            BufferOp::Delete => (Some(td.tg_trigtuple), None),
            BufferOp::Truncate | BufferOp::Unidentified | BufferOp::Redefined => (None, None),
        };
        let (relid, new_id, old_id) = PLANS.with(|p| {
            let mut plans = p.borrow_mut();
            let Some(plan) = plans.get_mut(&tgoid) else {
                errors::invalid_argument(FUNCTION, "no capture plan".into());
            };
            if identities == Identities::Fixed {
                // The identity of the int8 key 0, written for every row.
                plan.new.clear();
                let _ = rowid_codec::IdentityEncoder::begin(&mut plan.new, Domain::ScanKey, 1)
                    .and_then(|mut e| e.int8(0).and_then(|()| e.finish()));
                let fixed =
                    |t: Option<pg_sys::HeapTuple>| t.map(|_| crate::datum::to_bytea(&plan.new));
                return (plan.relid, fixed(new_tuple), fixed(old_tuple));
            }
            let new_id = new_tuple.map(|t| {
                identity(
                    &plan.fields,
                    &plan.attnos,
                    plan.domain,
                    tupdesc,
                    t,
                    &mut plan.new,
                );
                crate::datum::to_bytea(&plan.new)
            });
            let old_id = old_tuple.map(|t| {
                identity(
                    &plan.fields,
                    &plan.attnos,
                    plan.domain,
                    tupdesc,
                    t,
                    &mut plan.old,
                );
                crate::datum::to_bytea(&plan.old)
            });
            (plan.relid, new_id, old_id)
        });
        let bytea =
            |b: Option<*mut pg_sys::bytea>| b.map_or(pg_sys::Datum::from(0), pg_sys::Datum::from);
        let row = Row {
            values: [
                pg_sys::Datum::from(i64::from(xid)),
                pg_sys::Datum::from(seq),
                pg_sys::Datum::from(relid),
                pg_sys::Datum::from(op.code() as i8),
                bytea(new_id),
                bytea(old_id),
                pg_sys::Datum::from(0),
                pg_sys::Datum::from(lsn),
                pg_sys::Datum::from(buffer::ROW_IDENTITY_VERSION),
                pg_sys::Datum::from(buffer::ROW_PROBE_VERSION),
                pg_sys::Datum::from(0),
                // A trigger has the whole old row.
                pg_sys::Datum::from(b'F' as i8),
                pg_sys::Datum::from(0),
                pg_sys::Datum::from(0),
            ],
            nulls: [
                false,
                false,
                false,
                false,
                new_id.is_none(),
                old_id.is_none(),
                true,
                false,
                false,
                false,
                true,
                old_tuple.is_none(),
                true,
                true,
            ],
            tupdesc,
            old: old_tuple,
            new: new_tuple,
        };
        insert(tgoid, rel, &row);
        pg_sys::Datum::from(0)
    }
}

/// Opens the buffer with `RowExclusiveLock` (NULL when it no longer exists).
fn open_buffer(buffer: pg_sys::Oid) -> pg_sys::Relation {
    // SAFETY: try_table_open returns NULL for a missing relation, else an open relation
    // locked until the end of the transaction.
    unsafe { pg_sys::try_table_open(buffer, pg_sys::RowExclusiveLock as i32) }
}

/// Writes `row` into the buffer `rel` (open and locked), straight into its heap when nothing
/// the executor would do is bypassed, else through the kept plan; closes `rel` (the lock is
/// kept until the end of the transaction).
///
/// # Safety
/// `rel` is the open, locked buffer of trigger `tgoid`'s valid plan.
unsafe fn insert(tgoid: pg_sys::Oid, rel: pg_sys::Relation, row: &Row) {
    let name = || PLANS.with(|p| p.borrow().get(&tgoid).map(|plan| plan.buffer_name.clone()));
    // SAFETY: an open relation; its rd_rel and rd_att are valid while it is open.
    unsafe {
        let form = &*(*rel).rd_rel;
        if form.relhastriggers || form.relhasrules {
            errors::invalid_buffer(
                FUNCTION,
                &format!(
                    "{} is refused: it has triggers or rules, which would run as its writer",
                    name().unwrap_or_default()
                ),
            );
        }
        // The plan's check refused another access method when it was built (and changing
        // it rewrites the table, which invalidates the plan); this is the heap path's own
        // guard: simple_heap_insert into anything but a heap would corrupt it.
        if form.relam != pg_sys::HEAP_TABLE_AM_OID {
            errors::invalid_buffer(
                FUNCTION,
                &format!(
                    "{} is refused: it is not a heap table (its access method was changed)",
                    name().unwrap_or_default()
                ),
            );
        }
        if !form.relhasindex && !form.relrowsecurity {
            let tupdesc = (*rel).rd_att;
            let natts = (*tupdesc).natts as usize;
            // The row per attribute of the descriptor the plan was built with (the plan is
            // valid, so it is this one); heap_form_tuple only allocates.
            let tuple = PLANS.with(|p| {
                let mut plans = p.borrow_mut();
                let plan = plans.get_mut(&tgoid)?;
                if plan.heap_columns.len() != natts {
                    return None;
                }
                plan.heap_values.clear();
                plan.heap_nulls.clear();
                for column in &plan.heap_columns {
                    let (value, null) = row.value(*column);
                    plan.heap_values.push(value);
                    plan.heap_nulls.push(null);
                }
                Some(pg_sys::heap_form_tuple(
                    tupdesc,
                    plan.heap_values.as_mut_ptr(),
                    plan.heap_nulls.as_mut_ptr(),
                ))
            });
            let Some(tuple) = tuple else {
                errors::invalid_buffer(
                    FUNCTION,
                    &format!(
                        "{}: the change buffer's columns changed under the trigger",
                        name().unwrap_or_default()
                    ),
                );
            };
            pg_sys::simple_heap_insert(rel, tuple);
            pg_sys::heap_freetuple(tuple);
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            return;
        }
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        // Held until the execution returns: the code it runs (a constraint, an index
        // expression) can enter this trigger again, which may drop the cached plan.
        let kept = PLANS.with(|p| p.borrow().get(&tgoid).and_then(|plan| plan.spi.clone()));
        let columns = PLANS.with(|p| {
            p.borrow()
                .get(&tgoid)
                .map(|plan| plan.insert_columns.clone())
                .unwrap_or_default()
        });
        let plan = match kept {
            Some(plan) => plan,
            None => {
                let plan = Rc::new(prepare_insert(&name().unwrap_or_default(), &columns));
                let stored = PLANS.with(|p| match p.borrow_mut().get_mut(&tgoid) {
                    Some(cached) => {
                        cached.spi = Some(Rc::clone(&plan));
                        true
                    }
                    None => false,
                });
                if !stored {
                    drop(plan);
                    errors::invalid_argument(FUNCTION, "no capture plan".into());
                }
                plan
            }
        };
        let (mut values, nulls): (Vec<pg_sys::Datum>, Vec<std::ffi::c_char>) = columns
            .iter()
            .map(|(_, _, column)| {
                let (value, null) = row.value(*column);
                (value, if null { b'n' } else { b' ' } as std::ffi::c_char)
            })
            .unzip();
        let rc = plan.execute(&mut values, &nulls);
        drop(plan);
        if rc != pg_sys::SPI_OK_INSERT as i32 {
            errors::invalid_argument(FUNCTION, format!("the buffer insert returned {rc}"));
        }
    }
}

/// Creates the change buffer of `source` (in the extension's `pgtrickle_changes`, owned by
/// the source's owner, without PUBLIC access, depending on the source) and its capture
/// triggers, after validating the source and its identity; returns the buffer. The caller
/// must have the privileges of the source's owner.
pub fn capture_table(source_oid: pg_sys::Oid) -> String {
    let src = source(source_oid);
    if !src.callers {
        errors::refused(
            CAPTURE_TABLE,
            "42501",
            &format!("must be the owner of {} to capture it", src.name),
        );
    }
    check_source(CAPTURE_TABLE, &src);
    // The lock CREATE TRIGGER takes below, taken first: no DDL of the source and no write to
    // it (which writes the buffer) runs while its columns and identity are read and the
    // buffer follows them.
    // SAFETY: a relation lock on an existing relation's OID, held to the transaction's end.
    unsafe { pg_sys::LockRelationOid(source_oid, pg_sys::ShareRowExclusiveLock as i32) };
    // Refused by name when the source has no usable identity.
    identity_of(CAPTURE_TABLE, source_oid);
    // The buffer capture_table made before, found by its dependency on the source; a new
    // one is named `changes_<source oid>`, or with a suffix when a table (a capture role's,
    // which may create tables in the schema) already has that name.
    let existing = made_buffer(source_oid);
    let buffer = match existing {
        Some(oid) => buffer_name(oid),
        None => free_buffer_name(source_oid),
    };
    let quoted = buffer.quoted();
    let owner_name = role_name(src.owner);
    // Creating in, and giving away objects of, the extension's schema is its owner's right:
    // done as that role, restricted, with the locked path, from OIDs and quoted names.
    let as_extension = |f: &dyn Fn()| as_owner(crate::catalog::extension_owner(), f);
    let oid = match existing {
        Some(oid) => {
            // An existing buffer is adopted only if capture_table made it for this source; a
            // new owner of the source is given it.
            verify_made_for(CAPTURE_TABLE, oid, source_oid);
            give_to_source_owner(oid, source_oid);
            // A DDL the event trigger did not follow (event triggers off) is followed now.
            follow_columns(CAPTURE_TABLE, source_oid, oid);
            crate::redefinition::mark(source_oid, oid);
            oid
        }
        None => {
            // Fails unless the schema is the extension's own.
            changes_schema();
            let images = source_images(CAPTURE_TABLE, source_oid);
            as_extension(&|| {
                for sql in buffer::create_table(&buffer, &images) {
                    spi::run(&sql, &[]);
                }
                spi::run(&buffer::revoke_public(&buffer), &[]);
                spi::run(&format!("ALTER TABLE {quoted} OWNER TO {owner_name}"), &[]);
            });
            let oid = buffer_oid(&buffer).unwrap_or(pg_sys::InvalidOid);
            record_dependency(oid, source_oid);
            oid
        }
    };
    // The triggers write as the owner, who must be able to reach the buffer by name.
    as_extension(&|| {
        spi::run(
            &format!(
                "GRANT USAGE ON SCHEMA {} TO {owner_name}",
                quote_ident(buffer::DEFAULT_SCHEMA)
            ),
            &[],
        )
    });
    if existing.is_none() {
        // What its rows are written under, recorded by the owner, who can reach it now.
        crate::redefinition::record(source_oid, oid);
    }
    verify_buffer(CAPTURE_TABLE, oid, source_oid, src.owner);
    let arg = quoted.replace('\'', "''");
    with_locked_search_path(|| {
        for (name, events, level) in [
            ("pgtrickle_capture", "INSERT OR UPDATE OR DELETE", "ROW"),
            ("pgtrickle_capture_truncate", "TRUNCATE", "STATEMENT"),
        ] {
            spi::run(
                &format!(
                    "CREATE OR REPLACE TRIGGER {name} AFTER {events} ON {} FOR EACH {level} \
                     EXECUTE FUNCTION pgtrickle.capture_changes('{arg}')",
                    src.name
                ),
                &[],
            );
            // Fired in every session_replication_role, `replica` (a subscription's apply
            // worker) too.
            spi::run(
                &format!("ALTER TABLE {} ENABLE ALWAYS TRIGGER {name}", src.name),
                &[],
            );
        }
    });
    check_capture_triggers(CAPTURE_TABLE, source_oid, oid);
    quoted
}

/// The trigger buffer `capture_table` made for `source`: the ordinary table in the
/// extension's buffer schema that depends automatically on the whole source (a dependency
/// only `capture_table` records; no role can place one with SQL). `None` when it has none.
fn made_buffer(source: pg_sys::Oid) -> Option<pg_sys::Oid> {
    spi::one::<pg_sys::Oid>(
        &format!(
            "SELECT c.oid FROM pg_catalog.pg_depend d \
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid \
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND d.refobjid OPERATOR(pg_catalog.=) {} \
               AND d.refobjsubid OPERATOR(pg_catalog.=) 0 \
               AND d.deptype OPERATOR(pg_catalog.=) 'a' \
               AND c.relkind OPERATOR(pg_catalog.=) 'r' \
               AND n.nspname OPERATOR(pg_catalog.=) $1 \
             ORDER BY c.oid LIMIT 1",
            u32::from(source)
        ),
        &[buffer::DEFAULT_SCHEMA.into()],
    )
}

/// A name for a new buffer of `source`: `changes_<oid>`, or `changes_<oid>_<n>` with the
/// first `n` from 1 whose name no relation has.
fn free_buffer_name(source: pg_sys::Oid) -> QualifiedName {
    let base = format!("changes_{}", u32::from(source));
    (0..)
        .map(|n| match n {
            0 => QualifiedName::new(buffer::DEFAULT_SCHEMA, &base),
            n => QualifiedName::new(buffer::DEFAULT_SCHEMA, &format!("{base}_{n}")),
        })
        .find(|name| buffer_oid(name).is_none())
        .unwrap_or_else(|| QualifiedName::new(buffer::DEFAULT_SCHEMA, &base))
}

/// The OID of the relation `name` names, read from the catalog (the caller may not have
/// USAGE on its schema yet, which a lookup by name through the path would need).
fn buffer_oid(name: &QualifiedName) -> Option<pg_sys::Oid> {
    spi::one::<pg_sys::Oid>(
        "SELECT c.oid FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1 AND c.relname OPERATOR(pg_catalog.=) $2",
        &[
            name.schema.as_deref().unwrap_or_default().into(),
            name.name.as_str().into(),
        ],
    )
}

/// Records that `buffer` depends on `source` (automatically: dropping the source drops it).
fn record_dependency(buffer: pg_sys::Oid, source: pg_sys::Oid) {
    let address = |oid| pg_sys::ObjectAddress {
        classId: pg_sys::RelationRelationId,
        objectId: oid,
        objectSubId: 0,
    };
    // SAFETY: both relations exist (the buffer was created above, in this transaction).
    unsafe {
        pg_sys::recordDependencyOn(
            &address(buffer),
            &address(source),
            pg_sys::DependencyType::DEPENDENCY_AUTO,
        );
        pg_sys::CommandCounterIncrement();
    }
}

/// Refuses `buffer` (a relation) unless its columns are the buffer shape, nobody but its
/// owner (for a trigger buffer: its source's owner) can write it, writing it runs no code,
/// and every row is of this library's versions: what a reader calls before consuming a
/// buffer.
pub fn check_buffer(function: &str, oid: pg_sys::Oid) {
    let name = relation_name(oid);
    if let Err(e) = buffer::check_shape(&name, &buffer_columns(oid)) {
        errors::invalid_buffer(function, &e.to_string());
    }
    let w = writers(oid);
    // A trigger buffer belongs to its source's owner; another buffer (rowid-cdc's) to
    // whoever owns it.
    let source_owner = spi::one::<String>(
        &format!(
            "SELECT c.relowner::pg_catalog.regrole::pg_catalog.text \
             FROM pg_catalog.pg_depend d \
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.refobjid \
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND d.objid OPERATOR(pg_catalog.=) {} \
               AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND d.deptype OPERATOR(pg_catalog.=) 'a' LIMIT 1",
            u32::from(oid)
        ),
        &[],
    );
    let owner = source_owner.unwrap_or_else(|| w.owner.clone());
    if let Err(e) = buffer::check_writers(&name, &w, &owner) {
        errors::invalid_buffer(function, &e.to_string());
    }
    if let Some(source) = trigger_buffer_source(oid) {
        check_capture_triggers(function, source, oid);
    }
    let found = spi::rows(&buffer::foreign_versions_query(&name), &[], |row| {
        Ok((
            row.get::<i16>(1)?.unwrap_or(0),
            row.get::<i16>(2)?.unwrap_or(0),
        ))
    })
    .pop();
    if let Some((identity, probe)) = found {
        errors::invalid_buffer(
            function,
            &buffer::foreign_versions(&name, identity, probe).to_string(),
        );
    }
    // The format's constraints: a format-3 buffer admits no R row, and its readers know none.
    let defs = spi::rows(buffer::CONSTRAINTS_QUERY, &[name.as_str().into()], |row| {
        Ok(row.get::<String>(1)?.unwrap_or_default())
    });
    if let Err(e) = buffer::check_version_constraints(&name, &defs) {
        errors::invalid_buffer(function, &e.to_string());
    }
}

/// The source of a trigger buffer (`capture_table` records the buffer's automatic
/// dependency on it); `None` for a buffer another writer made.
fn trigger_buffer_source(buffer: pg_sys::Oid) -> Option<pg_sys::Oid> {
    spi::one::<pg_sys::Oid>(
        &format!(
            "SELECT d.refobjid FROM pg_catalog.pg_depend d \
             WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND d.objid OPERATOR(pg_catalog.=) {} \
               AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
               AND d.refobjsubid OPERATOR(pg_catalog.=) 0 \
               AND d.deptype OPERATOR(pg_catalog.=) 'a' LIMIT 1",
            u32::from(buffer)
        ),
        &[],
    )
}
