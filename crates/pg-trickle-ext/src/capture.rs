//! Trigger change capture: `pgtrickle.capture_changes()` appends one row per change to the
//! source's change buffer (spec/change-buffer.md, the shape `rowid_registry::buffer` owns and
//! `rowid-cdc`'s PostgreSQL sink writes too), with the old and new identities computed
//! straight from the trigger's tuples.
//!
//! - **One identity schema per trigger, validated once and cached** (per backend): the key the
//!   registry chooses for the table (`identity_messages::relation_schema`, the rule of
//!   `validate_source_identity` and of the WAL path), each key column's reader, the buffer's
//!   checked shape and a kept `INSERT` plan.
//! - **Rebuilt on relcache invalidation** of the source or the buffer: an `ALTER TABLE` that
//!   changes the key sends one, also inside the transaction (at the next command), so a
//!   statement never encodes under the schema of an earlier one.
//! - **The trigger works as the source table's owner**, who owns its buffer (the user id is
//!   switched around the plan's build and the insert, as PostgreSQL's own RI triggers do):
//!   PUBLIC has no access to buffers (design proposal §11.1), and whoever may change the
//!   source may append its changes, nothing more.
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

use pgrx::pg_guard;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rowid_codec::Domain;
use rowid_registry::buffer::{self, BufferOp, CatalogColumn, OLD_ROW_ID};
use rowid_registry::schema_message::IdentityDef;
use rowid_registry::sql::{QualifiedName, ROW_ID, quote_ident};

use crate::catalog::{attribute, attribute_name, row_id_domain};
use crate::errors;
use crate::fields::{self, Field};
use crate::identity_messages::relation_schema;

/// The trigger function, for messages.
const FUNCTION: &str = "pgtrickle.capture_changes";

/// What one capture trigger needs per row, built once.
struct Plan {
    relid: pg_sys::Oid,
    /// Cleared by a relcache invalidation of `relid` or `buffer`.
    valid: Rc<Cell<bool>>,
    domain: Domain,
    fields: Vec<Field>,
    /// Zero-based attribute index of each field in the source's tuple descriptor.
    attnos: Vec<usize>,
    /// How rows reach the buffer.
    insert: Insert,
    old: Vec<u8>,
    new: Vec<u8>,
}

/// How a plan's rows reach its buffer.
#[derive(Clone, Copy)]
enum Insert {
    /// Straight into the heap (`simple_heap_insert`): the buffer is a plain table with no
    /// index, trigger, rule or row security, whose version constraints were checked when
    /// the plan was built (the executor, and with it the CHECK constraints, is bypassed:
    /// building its state per row costs more than the identities).
    Heap(pg_sys::Oid),
    /// Through a kept SPI plan: any other buffer (a reader added an index, say).
    Spi(pg_sys::SPIPlanPtr),
}

impl Drop for Plan {
    fn drop(&mut self) {
        fields::release(&mut self.fields);
        if let Insert::Spi(plan) = self.insert {
            // SAFETY: a kept plan of this backend, freed once.
            unsafe { pg_sys::SPI_freeplan(plan) };
        }
    }
}

thread_local! {
    /// Plans by trigger OID (backends are single-threaded).
    static PLANS: RefCell<HashMap<pg_sys::Oid, Plan>> = RefCell::new(HashMap::new());
    /// What the relcache callback may clear: (relation, the flag of the plan using it).
    /// Never borrowed across a call into PostgreSQL.
    static WATCH: RefCell<Vec<(pg_sys::Oid, Rc<Cell<bool>>)>> = const { RefCell::new(Vec::new()) };
    static CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// The transaction the last change belonged to, and its count.
    static SEQ: Cell<(u32, i32)> = const { Cell::new((0, 0)) };
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

/// A buffer's name, quoted, from its OID.
fn buffer_name(oid: pg_sys::Oid) -> String {
    crate::catalog::relation_name(oid)
}

/// The buffer's live columns.
fn buffer_columns(oid: pg_sys::Oid) -> Vec<CatalogColumn> {
    let query = buffer::SHAPE_QUERY.replace("$1::text::regclass", &u32::from(oid).to_string());
    Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            out.push(CatalogColumn {
                name: row.get::<String>(1)?.unwrap_or_default(),
                sql_type: row.get::<String>(2)?.unwrap_or_default(),
                not_null: row.get::<bool>(3)?.unwrap_or(false),
            });
        }
        Ok::<_, pgrx::spi::SpiError>(out)
    })
    .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// Refuses a buffer whose columns are not the buffer shape.
fn check_shape(function: &str, oid: pg_sys::Oid) {
    if let Err(e) = buffer::check_shape(&buffer_name(oid), &buffer_columns(oid)) {
        errors::invalid_buffer(function, &e.to_string());
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

/// Builds the plan of trigger `trigger` on `relation`, writing into `buffer`.
///
/// # Safety
/// Must run inside a backend, in a trigger call on `relation`.
unsafe fn build(relation: pg_sys::Relation, buffer: pg_sys::Oid, valid: Rc<Cell<bool>>) -> Plan {
    // SAFETY: the trigger's open relation; rd_att is its tuple descriptor.
    let (relid, tupdesc) = unsafe { ((*relation).rd_id, (*relation).rd_att) };
    let def = identity_of(FUNCTION, relid);
    check_shape(FUNCTION, buffer);
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
    let mut fields = Vec::with_capacity(def.fields.len());
    let mut attnos = Vec::with_capacity(def.fields.len());
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
    }
    let insert = if heap_insertable(buffer) {
        Insert::Heap(buffer)
    } else {
        Insert::Spi(prepare_insert(&buffer_name(buffer)))
    };
    Plan {
        relid,
        valid,
        domain: def.domain,
        fields,
        attnos,
        insert,
        old: Vec::new(),
        new: Vec::new(),
    }
}

/// Whether rows may go straight into the buffer's heap: a plain table without index,
/// trigger, rule or row security, whose CHECK constraints pin this library's versions
/// (refused by name otherwise: those constraints are what the heap path does not evaluate).
fn heap_insertable(buffer: pg_sys::Oid) -> bool {
    let name = buffer_name(buffer);
    let query =
        buffer::CONSTRAINTS_QUERY.replace("$1::text::regclass", &u32::from(buffer).to_string());
    let defs = Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            out.push(row.get::<String>(1)?.unwrap_or_default());
        }
        Ok::<_, pgrx::spi::SpiError>(out)
    })
    .unwrap_or_else(|e| errors::catalog_query(&e));
    if let Err(e) = buffer::check_version_constraints(&name, &defs) {
        errors::invalid_buffer(FUNCTION, &e.to_string());
    }
    Spi::get_one::<bool>(&format!(
        "SELECT relkind = 'r' AND NOT relhasindex AND NOT relhastriggers AND NOT relhasrules \
         AND NOT relrowsecurity AND has_table_privilege(oid, 'INSERT') \
         FROM pg_class WHERE oid = {}",
        u32::from(buffer)
    ))
    .unwrap_or_else(|e| errors::catalog_query(&e))
    .unwrap_or(false)
}

/// The kept `INSERT` into the buffer: xid, seq, source_relid, op, new, old, change_lsn and
/// both versions (commit_lsn stays NULL: a trigger runs before its commit).
fn prepare_insert(buffer: &str) -> pg_sys::SPIPlanPtr {
    let sql = format!(
        "INSERT INTO {buffer} (\"xid\", \"seq\", \"source_relid\", \"op\", {}, {}, \
         \"change_lsn\", \"row_identity_version\", \"row_probe_version\") \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        quote_ident(ROW_ID),
        quote_ident(OLD_ROW_ID)
    );
    let Ok(sql) = CString::new(sql) else {
        errors::invalid_argument(FUNCTION, "buffer name with a NUL byte".into());
    };
    let mut types = [
        pg_sys::INT8OID,
        pg_sys::INT4OID,
        pg_sys::OIDOID,
        pg_sys::CHAROID,
        pg_sys::BYTEAOID,
        pg_sys::BYTEAOID,
        pg_sys::PG_LSNOID,
        pg_sys::INT2OID,
        pg_sys::INT2OID,
    ];
    // SAFETY: SPI is connected by the caller's Spi::connect scope below; the plan is kept
    // (moved out of the SPI procedure's memory) and freed when the Plan is dropped.
    Spi::connect(|_| {
        let plan =
            unsafe { pg_sys::SPI_prepare(sql.as_ptr(), types.len() as i32, types.as_mut_ptr()) };
        if plan.is_null() || unsafe { pg_sys::SPI_keepplan(plan) } != 0 {
            errors::invalid_argument(FUNCTION, "cannot prepare the buffer insert".into());
        }
        plan
    })
}

/// The buffer a trigger writes: its first argument, a relation name.
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
    Spi::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[name.as_str().into()])
        .unwrap_or_else(|e| errors::catalog_query(&e))
        .unwrap_or_else(|| {
            errors::invalid_argument(FUNCTION, format!("change buffer {name:?} does not exist"))
        })
}

/// The next `seq` of the current transaction.
fn next_seq() -> (u32, i32) {
    // SAFETY: the trigger runs in a transaction that is writing, so it has (or now gets) a
    // top-level xid.
    let xid = unsafe { pg_sys::GetTopTransactionId() }.into_inner();
    SEQ.with(|s| {
        let (last, n) = s.get();
        let n = if last == xid { n + 1 } else { 1 };
        s.set((xid, n));
        (xid, n)
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
        let trigger = td.tg_trigger;
        let tgoid = (*trigger).tgoid;
        let relation = td.tg_relation;
        // Everything from here runs as the source's owner (restored below; an error's
        // abort restores it too).
        let owner = (*(*relation).rd_rel).relowner;
        let (mut user, mut sec) = (pg_sys::InvalidOid, 0);
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec);
        pg_sys::SetUserIdAndSecContext(
            owner,
            sec | (pg_sys::SECURITY_LOCAL_USERID_CHANGE | pg_sys::SECURITY_NOFORCE_RLS) as i32,
        );
        let stale = PLANS.with(|p| p.borrow().get(&tgoid).is_none_or(|plan| !plan.valid.get()));
        if stale {
            // Dropped first: its reader memory and kept plan go before the new ones.
            PLANS.with(|p| p.borrow_mut().remove(&tgoid));
            let buffer = trigger_buffer(trigger);
            let valid = Rc::new(Cell::new(true));
            WATCH.with(|w| {
                let mut w = w.borrow_mut();
                w.retain(|(_, v)| Rc::strong_count(v) > 1);
                w.push(((*relation).rd_id, valid.clone()));
                w.push((buffer, valid.clone()));
            });
            let plan = build(relation, buffer, valid);
            PLANS.with(|p| p.borrow_mut().insert(tgoid, plan));
        }
        let tupdesc = (*relation).rd_att;
        let (xid, seq) = next_seq();
        let lsn = pg_sys::GetXLogInsertRecPtr();
        // The identities are encoded with the plan borrowed, then the insert runs with it
        // released (the insert can process invalidations, which must find nothing borrowed).
        let (insert, relid, new_id, old_id) = PLANS.with(|p| {
            let mut plans = p.borrow_mut();
            let Some(plan) = plans.get_mut(&tgoid) else {
                errors::invalid_argument(FUNCTION, "no capture plan".into());
            };
            let (old_tuple, new_tuple) = match op {
                BufferOp::Insert => (None, Some(td.tg_trigtuple)),
                BufferOp::Update => (Some(td.tg_trigtuple), Some(td.tg_newtuple)),
                BufferOp::Delete => (Some(td.tg_trigtuple), None),
                BufferOp::Truncate => (None, None),
            };
            if identities == Identities::Fixed {
                // The identity of the int8 key 0, written for every row.
                plan.new.clear();
                let _ = rowid_codec::IdentityEncoder::begin(&mut plan.new, Domain::ScanKey, 1)
                    .and_then(|mut e| e.int8(0).and_then(|()| e.finish()));
                let fixed =
                    |t: Option<pg_sys::HeapTuple>| t.map(|_| crate::datum::to_bytea(&plan.new));
                return (plan.insert, plan.relid, fixed(new_tuple), fixed(old_tuple));
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
            (plan.insert, plan.relid, new_id, old_id)
        });
        let bytea =
            |b: Option<*mut pg_sys::bytea>| b.map_or(pg_sys::Datum::from(0), pg_sys::Datum::from);
        let mut values = [
            pg_sys::Datum::from(i64::from(xid)),
            pg_sys::Datum::from(seq),
            pg_sys::Datum::from(relid),
            pg_sys::Datum::from(op.code() as i8),
            bytea(new_id),
            bytea(old_id),
            pg_sys::Datum::from(lsn),
            pg_sys::Datum::from(buffer::ROW_IDENTITY_VERSION),
            pg_sys::Datum::from(buffer::ROW_PROBE_VERSION),
        ];
        let nulls: [std::ffi::c_char; 9] = [
            b' ' as _,
            b' ' as _,
            b' ' as _,
            b' ' as _,
            if new_id.is_some() { b' ' } else { b'n' } as _,
            if old_id.is_some() { b' ' } else { b'n' } as _,
            b' ' as _,
            b' ' as _,
            b' ' as _,
        ];
        match insert {
            Insert::Heap(buffer) => {
                // The buffer's columns in table order: commit_lsn (7th) is NULL.
                let mut row = [
                    values[0],
                    values[1],
                    values[2],
                    values[3],
                    values[4],
                    values[5],
                    pg_sys::Datum::from(0),
                    values[6],
                    values[7],
                    values[8],
                ];
                let mut isnull = [
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
                ];
                let rel = pg_sys::table_open(buffer, pg_sys::RowExclusiveLock as i32);
                let tuple =
                    pg_sys::heap_form_tuple((*rel).rd_att, row.as_mut_ptr(), isnull.as_mut_ptr());
                pg_sys::simple_heap_insert(rel, tuple);
                pg_sys::heap_freetuple(tuple);
                pg_sys::table_close(rel, pg_sys::NoLock as i32);
                pg_sys::SetUserIdAndSecContext(user, sec);
            }
            Insert::Spi(plan) => {
                pg_sys::SPI_connect();
                let rc =
                    pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_ptr(), false, 0);
                pg_sys::SPI_finish();
                pg_sys::SetUserIdAndSecContext(user, sec);
                if rc != pg_sys::SPI_OK_INSERT as i32 {
                    errors::invalid_argument(FUNCTION, format!("the buffer insert returned {rc}"));
                }
            }
        }
        pg_sys::Datum::from(0)
    }
}

/// Creates the change buffer of `source` (in `pgtrickle_changes`, owned by the source's owner,
/// without PUBLIC access) and its capture triggers, after validating the source's identity;
/// returns the buffer.
pub fn capture_table(source: pg_sys::Oid) -> String {
    const CAPTURE_TABLE: &str = "pgtrickle.capture_table";
    // Refused by name when the source has no usable identity.
    identity_of(CAPTURE_TABLE, source);
    let buffer = QualifiedName::new(
        buffer::DEFAULT_SCHEMA,
        &format!("changes_{}", u32::from(source)),
    );
    let source_name = buffer_name(source);
    let exists = Spi::get_one_with_args::<bool>(
        "SELECT to_regclass($1) IS NOT NULL",
        &[buffer.quoted().as_str().into()],
    )
    .unwrap_or_else(|e| errors::catalog_query(&e))
    .unwrap_or(false);
    let run = |sql: &str| Spi::run(sql).unwrap_or_else(|e| errors::catalog_query(&e));
    if exists {
        check_buffer(CAPTURE_TABLE, &buffer.quoted());
    } else {
        run(&format!(
            "CREATE SCHEMA IF NOT EXISTS {}",
            quote_ident(buffer::DEFAULT_SCHEMA)
        ));
        run(&buffer::create_table(&buffer));
        run(&buffer::revoke_public(&buffer));
        // The triggers write as the source's owner: the buffer is theirs.
        run(&format!(
            "DO $$ BEGIN IF (SELECT relowner FROM pg_class WHERE oid = {src}) \
             <> (SELECT relowner FROM pg_class WHERE oid = {buf}::regclass) THEN \
             EXECUTE format('ALTER TABLE %s OWNER TO %I', {buf}::regclass, \
             (SELECT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner \
             WHERE c.oid = {src})); END IF; END $$",
            src = u32::from(source),
            buf = quote_literal(&buffer.quoted()),
        ));
    }
    let arg = buffer.quoted().replace('\'', "''");
    run(&format!(
        "CREATE OR REPLACE TRIGGER pgtrickle_capture AFTER INSERT OR UPDATE OR DELETE ON {source_name} \
         FOR EACH ROW EXECUTE FUNCTION pgtrickle.capture_changes('{arg}')"
    ));
    run(&format!(
        "CREATE OR REPLACE TRIGGER pgtrickle_capture_truncate AFTER TRUNCATE ON {source_name} \
         FOR EACH STATEMENT EXECUTE FUNCTION pgtrickle.capture_changes('{arg}')"
    ));
    buffer.quoted()
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Refuses `buffer` (a relation name) unless its columns are the buffer shape and every row
/// is of this library's versions: what a reader calls before consuming a buffer.
pub fn check_buffer(function: &str, buffer: &str) {
    let oid =
        Spi::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[buffer.into()])
            .unwrap_or_else(|e| errors::catalog_query(&e))
            .unwrap_or_else(|| {
                errors::invalid_argument(function, format!("{buffer:?} does not exist"))
            });
    check_shape(function, oid);
    let name = buffer_name(oid);
    let query = buffer::foreign_versions_query(&name);
    let found = Spi::connect(|c| {
        let mut rows = c.select(&query, Some(1), &[])?;
        Ok::<_, pgrx::spi::SpiError>(match rows.next() {
            Some(row) => Some((
                row.get::<i16>(1)?.unwrap_or(0),
                row.get::<i16>(2)?.unwrap_or(0),
            )),
            None => None,
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e));
    if let Some((identity, probe)) = found {
        errors::invalid_buffer(
            function,
            &buffer::foreign_versions(&name, identity, probe).to_string(),
        );
    }
}
