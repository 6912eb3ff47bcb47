//! A stored statement calls what create resolved, nothing else (spec/stream-tables.md §10.2,
//! issue 47 requirement 2).
//!
//! A stream table's statements are stored as text and analyzed again whenever PostgreSQL
//! plans them (a new backend, a plan invalidated by a DDL), and every function and operator
//! name in them is resolved again: an overload created later in the same schema
//! (`shared.g(integer)` beside the `shared.g(anyelement)` the query called) would be called
//! instead, as the stream table's owner. A view is immune because it stores OIDs.
//!
//! Data flow and the rule:
//!
//! - **At create** ([`collect`]): the analyzed query is walked and every user-defined function
//!   and operator it resolved is recorded (the catalog's `bound_functions`,
//!   `bound_operators`), with a `pg_depend` entry from the storage to each
//!   ([`record_dependencies`], as a view records them), so `DROP FUNCTION` of one is refused
//!   and `DROP ... CASCADE` drops the stream table. What a function *is* (its body,
//!   volatility, settings) is part of the sources' shape (`crate::catalog::source_shape`): a
//!   `CREATE OR REPLACE` or `ALTER FUNCTION` makes the next refresh rebuild the stream table,
//!   which checks the query again as at create.
//! - **At every analysis of a stored statement** ([`bound`] around its execution, checked by
//!   the post-parse-analysis hook [`install`] sets): every function and operator the analysis
//!   resolved must be built in (an OID below `FirstNormalObjectId`), the extension's own, or
//!   one create recorded; every table it reads must be a source, the storage, or the
//!   extension's. Anything else is refused before the statement plans, naming what it
//!   resolved and what to do: the statement never calls it.
//!
//! The check sees every analysis of the statement, also one the plan cache makes again
//! inside an execution, because PostgreSQL calls the hook from each. Bodies of the functions
//! the statement calls resolve their own names as they do for a view's query.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{CStr, c_void};

use pgrx::pg_sys;
use pgrx::prelude::*;

/// What create resolved, and what a stored statement may use besides what is built in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowed {
    /// The user-defined functions (aggregates and window functions among them).
    pub functions: HashSet<pg_sys::Oid>,
    /// The user-defined operators.
    pub operators: HashSet<pg_sys::Oid>,
    /// The tables it reads: the sources and the storage.
    pub relations: HashSet<pg_sys::Oid>,
}

/// What one analyzed query tree uses.
#[derive(Default)]
struct Used {
    functions: HashSet<pg_sys::Oid>,
    operators: HashSet<pg_sys::Oid>,
    relations: HashSet<pg_sys::Oid>,
    /// The columns read of each table (attribute numbers; 0: the whole row).
    columns: HashMap<pg_sys::Oid, BTreeSet<i16>>,
}

/// A stored statement being run, with what it may use.
struct Check {
    name: String,
    sql: String,
    allowed: Allowed,
}

thread_local! {
    /// The stored statements being run, innermost last.
    static CHECKS: RefCell<Vec<Check>> = const { RefCell::new(Vec::new()) };
    /// The extension's schemas (`pgtrickle`, `pgtrickle_changes`), looked up once.
    static OWN_SCHEMAS: RefCell<Option<[pg_sys::Oid; 2]>> = const { RefCell::new(None) };
}

/// The post-parse-analysis hook that was there before [`install`].
static mut PREVIOUS_ANALYZE: pg_sys::post_parse_analyze_hook_type = None;

/// Installs the post-parse-analysis hook (once per backend, from `_PG_init`).
pub fn install() {
    // SAFETY: hooks are installed from `_PG_init`, on the backend's one thread, before any
    // statement of this library runs; the previous hook is kept and called.
    unsafe {
        PREVIOUS_ANALYZE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(analyze_hook);
    }
}

/// The user-defined functions and operators the analyzed query `query` resolved (what a
/// stored statement of it may call besides what is built in).
///
/// # Safety
/// `query` must be an analyzed `Query` valid for this call.
pub unsafe fn collect(query: *mut pg_sys::Query) -> Allowed {
    // SAFETY: guaranteed by the caller.
    let used = unsafe { walk(query) };
    Allowed {
        functions: used
            .functions
            .into_iter()
            .filter(|f| user_defined(*f) && !own_function(*f))
            .collect(),
        operators: used
            .operators
            .into_iter()
            .filter(|o| user_defined(*o))
            .collect(),
        relations: HashSet::new(),
    }
}

/// The columns the analyzed query `query` reads of each table it reads, as PostgreSQL's
/// permission check sees them (attribute numbers, ascending; 0: the whole row; negative: a
/// system column): what the stream table's owner must keep the right to read for its
/// maintenance to go on (the columns from 0 up).
///
/// # Safety
/// `query` must be an analyzed `Query` valid for this call.
pub unsafe fn columns_read(query: *mut pg_sys::Query) -> HashMap<pg_sys::Oid, Vec<i16>> {
    // SAFETY: guaranteed by the caller.
    let used = unsafe { walk(query) };
    used.columns
        .into_iter()
        .map(|(relid, columns)| (relid, columns.into_iter().collect()))
        .collect()
}

/// Records that the storage `relid` depends on every function and operator of `allowed`, as
/// a view's rule does: dropping one is refused, and `DROP ... CASCADE` drops the storage.
pub fn record_dependencies(relid: pg_sys::Oid, allowed: &Allowed) {
    let depender = pg_sys::ObjectAddress {
        classId: pg_sys::RelationRelationId,
        objectId: relid,
        objectSubId: 0,
    };
    let referenced = allowed
        .functions
        .iter()
        .map(|f| (pg_sys::ProcedureRelationId, *f))
        .chain(
            allowed
                .operators
                .iter()
                .map(|o| (pg_sys::OperatorRelationId, *o)),
        );
    for (class, oid) in referenced {
        let object = pg_sys::ObjectAddress {
            classId: class,
            objectId: oid,
            objectSubId: 0,
        };
        // SAFETY: both addresses name existing objects (the storage was just created, the
        // function or operator was resolved in this transaction and is locked by no one
        // dropping it: a concurrent DROP waits for this transaction's catalog rows).
        unsafe {
            pg_sys::recordDependencyOn(
                &depender,
                &object,
                pg_sys::DependencyType::DEPENDENCY_NORMAL,
            )
        };
    }
}

/// Runs `f`, which runs `sql`, a stored statement of the stream table `name`: every analysis
/// of `sql` inside it is checked against `allowed` (see the module's doc).
pub fn bound<R>(name: &str, sql: &str, allowed: &Allowed, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            CHECKS.with(|c| c.borrow_mut().pop());
        }
    }
    CHECKS.with(|c| {
        c.borrow_mut().push(Check {
            name: name.to_string(),
            sql: sql.to_string(),
            allowed: allowed.clone(),
        })
    });
    let _pop = Pop;
    f()
}

/// `oids` in ascending order (how the catalog records them).
pub fn sorted(oids: &HashSet<pg_sys::Oid>) -> Vec<pg_sys::Oid> {
    let mut out: Vec<pg_sys::Oid> = oids.iter().copied().collect();
    out.sort_by_key(|o| u32::from(*o));
    out
}

/// Whether `oid` is an object created after initdb (not built in).
fn user_defined(oid: pg_sys::Oid) -> bool {
    u32::from(oid) >= pg_sys::FirstNormalObjectId
}

/// Whether function `oid` is in one of the extension's schemas (only the extension creates
/// objects there).
fn own_function(oid: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup by OID.
    let namespace = unsafe { pg_sys::get_func_namespace(oid) };
    own_schemas().contains(&namespace)
}

/// Whether relation `oid` is in one of the extension's schemas.
fn own_relation(oid: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup by OID.
    let namespace = unsafe { pg_sys::get_rel_namespace(oid) };
    own_schemas().contains(&namespace)
}

fn own_schemas() -> [pg_sys::Oid; 2] {
    OWN_SCHEMAS.with(|s| {
        *s.borrow_mut().get_or_insert_with(|| {
            // SAFETY: namespace lookups by NUL-terminated name (InvalidOid when missing).
            unsafe {
                [
                    pg_sys::get_namespace_oid(c"pgtrickle".as_ptr(), true),
                    pg_sys::get_namespace_oid(c"pgtrickle_changes".as_ptr(), true),
                ]
            }
        })
    })
}

/// The post-parse-analysis hook: a stored statement being run is checked.
#[pg_guard]
unsafe extern "C-unwind" fn analyze_hook(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    // SAFETY: the arguments PostgreSQL gave this hook, passed on unchanged.
    unsafe {
        if let Some(previous) = PREVIOUS_ANALYZE {
            previous(pstate, query, jstate);
        }
    }
    // SAFETY: the parse state of this analysis; its source text is NUL-terminated.
    let text = unsafe {
        let source = (*pstate).p_sourcetext;
        if source.is_null() {
            return;
        }
        CStr::from_ptr(source)
    };
    let refusal = CHECKS.with(|c| {
        let checks = c.borrow();
        let check = checks.last()?;
        if text.to_bytes() != check.sql.as_bytes() {
            return None;
        }
        // SAFETY: the analyzed query of this analysis.
        let used = unsafe { walk(query) };
        refusal(check, &used)
    });
    if let Some(message) = refusal {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            message,
            "a stream table's stored statements call only what its create resolved: drop what \
             was created since, or rebuild the stream table (alter_stream_table) to use it"
        );
    }
}

/// Why `used` breaks `check` (None: it does not).
fn refusal(check: &Check, used: &Used) -> Option<String> {
    let name = &check.name;
    if let Some(f) = used
        .functions
        .iter()
        .find(|f| user_defined(**f) && !check.allowed.functions.contains(f) && !own_function(**f))
    {
        return Some(format!(
            "{name}: its stored statement now resolves the function {}, which is not what \
             create resolved (a function created or replaced since)",
            // SAFETY: formats an existing function's signature.
            text_of(unsafe { pg_sys::format_procedure(*f) })
        ));
    }
    if let Some(o) = used
        .operators
        .iter()
        .find(|o| user_defined(**o) && !check.allowed.operators.contains(o))
    {
        return Some(format!(
            "{name}: its stored statement now resolves the operator {}, which is not what \
             create resolved (an operator created since)",
            // SAFETY: formats an existing operator's signature.
            text_of(unsafe { pg_sys::format_operator(*o) })
        ));
    }
    if let Some(r) = used
        .relations
        .iter()
        .find(|r| user_defined(**r) && !check.allowed.relations.contains(r) && !own_relation(**r))
    {
        return Some(format!(
            "{name}: its stored statement now reads {}, which is not a table it was created \
             over (a source renamed, and another table given its name)",
            qualified_relation(*r)
        ));
    }
    None
}

/// `schema.relation` of relation `oid`, by syscache lookups (no statement is run inside the
/// hook).
fn qualified_relation(oid: pg_sys::Oid) -> String {
    // SAFETY: syscache lookups by OID; each returns a palloc'd name or NULL.
    let (schema, name) = unsafe {
        (
            text_of(pg_sys::get_namespace_name(pg_sys::get_rel_namespace(oid))),
            text_of(pg_sys::get_rel_name(oid)),
        )
    };
    rowid_registry::sql::QualifiedName::new(&schema, &name).quoted()
}

fn text_of(p: *mut std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a palloc'd NUL-terminated string PostgreSQL returned.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Every function, operator and relation an analyzed query tree uses, subqueries, CTEs and
/// sublinks included.
///
/// # Safety
/// `query` must be an analyzed `Query` valid for this call.
unsafe fn walk(query: *mut pg_sys::Query) -> Used {
    let mut used = Used::default();
    // SAFETY: guaranteed by the caller; the walker only reads the tree, and `used` outlives
    // the walk.
    unsafe {
        visit(query.cast(), (&raw mut used).cast());
    }
    used
}

/// The tree walker's callback: records what `node` uses and walks on (false: go on).
#[pg_guard]
unsafe extern "C-unwind" fn visit(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: `context` is the `Used` of `walk`; `node` a node of the tree being walked,
    // read by its tag.
    unsafe {
        let used = &mut *context.cast::<Used>();
        match (*node).type_ {
            pg_sys::NodeTag::T_Query => {
                selected_columns(node.cast(), &mut used.columns);
                return pg_sys::query_tree_walker(
                    node.cast(),
                    Some(visit),
                    context,
                    pg_sys::QTW_EXAMINE_RTES_BEFORE as i32,
                );
            }
            pg_sys::NodeTag::T_RangeTblEntry => {
                let rte = node.cast::<pg_sys::RangeTblEntry>();
                if (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION {
                    used.relations.insert((*rte).relid);
                }
                return false;
            }
            pg_sys::NodeTag::T_FuncExpr => {
                used.functions
                    .insert((*node.cast::<pg_sys::FuncExpr>()).funcid);
            }
            pg_sys::NodeTag::T_OpExpr
            | pg_sys::NodeTag::T_DistinctExpr
            | pg_sys::NodeTag::T_NullIfExpr => {
                used.operators.insert((*node.cast::<pg_sys::OpExpr>()).opno);
            }
            pg_sys::NodeTag::T_ScalarArrayOpExpr => {
                used.operators
                    .insert((*node.cast::<pg_sys::ScalarArrayOpExpr>()).opno);
            }
            pg_sys::NodeTag::T_RowCompareExpr => {
                let opnos = (*node.cast::<pg_sys::RowCompareExpr>()).opnos;
                for opno in pgrx::PgList::<pg_sys::Oid>::from_pg(opnos).iter_oid() {
                    used.operators.insert(opno);
                }
            }
            pg_sys::NodeTag::T_Aggref => {
                used.functions
                    .insert((*node.cast::<pg_sys::Aggref>()).aggfnoid);
            }
            pg_sys::NodeTag::T_WindowFunc => {
                used.functions
                    .insert((*node.cast::<pg_sys::WindowFunc>()).winfnoid);
            }
            _ => {}
        }
        pg_sys::expression_tree_walker(node, Some(visit), context)
    }
}

/// Adds the columns query level `query` reads of each table to `columns` (from its range
/// table's permission facts: the columns PostgreSQL checks SELECT on).
///
/// # Safety
/// `query` must be an analyzed `Query` valid for this call.
unsafe fn selected_columns(
    query: *mut pg_sys::Query,
    columns: &mut HashMap<pg_sys::Oid, BTreeSet<i16>>,
) {
    let mut add = |relid: pg_sys::Oid, set: *mut pg_sys::Bitmapset| {
        let entry = columns.entry(relid).or_default();
        let mut member = -1;
        loop {
            // SAFETY: a Bitmapset of the analyzed query (or NULL: empty).
            member = unsafe { pg_sys::bms_next_member(set, member) };
            if member < 0 {
                break;
            }
            // System columns are negative: they need no privilege of their own, and what
            // reads them is told by their number (crate::stream_table).
            let attnum = member + pg_sys::FirstLowInvalidHeapAttributeNumber;
            entry.insert(attnum as i16);
        }
    };
    // SAFETY: the analyzed query's range table (PostgreSQL 15: each entry carries its
    // permission facts) or permission facts (16 and later), read only.
    unsafe {
        #[cfg(feature = "pg15")]
        for rte in pgrx::PgList::<pg_sys::RangeTblEntry>::from_pg((*query).rtable).iter_ptr() {
            if (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION {
                add((*rte).relid, (*rte).selectedCols);
            }
        }
        #[cfg(not(feature = "pg15"))]
        for info in
            pgrx::PgList::<pg_sys::RTEPermissionInfo>::from_pg((*query).rteperminfos).iter_ptr()
        {
            add((*info).relid, (*info).selectedCols);
        }
    }
}
