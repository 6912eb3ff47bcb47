//! A stream table's query read into `rowid-ivm`'s operator tree (spec/stream-tables.md §1),
//! from PostgreSQL's own analysis of it: the server parses and resolves every name and type
//! under the caller's `search_path`; this module only walks the analyzed `Query` and asks the
//! server to deparse each expression, with the path locked so that every function, operator
//! and type outside `pg_catalog` comes back schema-qualified. Anything the tree has no
//! operator for is refused, naming the construct and where it is.

use std::collections::HashMap;
use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use rowid_ivm::plan::{
    AggregateFunc, ArgClass, Call, Expr, OuterKind, Output, Plan, SetOpKind, SourceKey,
    StoredIdentity,
};
use rowid_ivm::sql::ROW_ID;
use rowid_registry::sql::quote_ident;
use rowid_registry::{FieldSpec, OpClass, choose_scan_key, resolve_schema};

use crate::catalog::{
    all_columns, encoder_collation, index_candidates, relation_facts, server_context, type_ref,
};
use crate::{errors, guard, spi};

/// The aggregates the operator tree has (in `pg_catalog`).
const AGGREGATES: &[&str] = &[
    "count", "sum", "avg", "min", "max", "bool_and", "bool_or", "every",
];

/// The query read: its tree, and the catalog facts of every value its identities hold.
pub struct ReadQuery {
    /// The operator tree.
    pub plan: Plan,
    /// Each value expression's field facts, by its SQL and type (for the registry's checks
    /// and the identity's size bound).
    pub fields: HashMap<(String, String), FieldSpec>,
    /// The source tables, as OIDs, each once, in the order met.
    pub sources: Vec<pg_sys::Oid>,
    /// The user-defined functions and operators the query resolved: all its stored
    /// statements may call besides what is built in ([`crate::binding`]).
    pub bound: crate::binding::Allowed,
    /// The columns the query reads of each table (attribute numbers; 0: the whole row).
    pub columns_read: HashMap<pg_sys::Oid, Vec<i16>>,
}

/// Reads `query` (one `SELECT`) for `function`'s errors: analyzed under the caller's
/// settings, deparsed under the refresh's (`time_zone` and [`guard::with_pinned_settings`]),
/// so that the text reads back as the same values when a refresh runs it.
pub fn read(function: &'static str, query: &str, time_zone: &str) -> ReadQuery {
    let Ok(text) = CString::new(query) else {
        errors::invalid_argument(function, "the query contains a NUL byte".into());
    };
    let mut reader = Reader {
        function,
        fields: HashMap::new(),
        sources: Vec::new(),
        levels: Vec::new(),
        sublinks_allowed: false,
    };
    // SAFETY: parse analysis of a NUL-terminated text in the current memory context; the
    // returned trees live until the context ends, past this function's use of them.
    let analyzed = unsafe {
        let raw = pg_sys::pg_parse_query(text.as_ptr());
        let raws = pgrx::PgList::<pg_sys::RawStmt>::from_pg(raw);
        if raws.len() != 1 {
            errors::invalid_argument(
                function,
                format!("the query must be one statement, not {}", raws.len()),
            );
        }
        let Some(stmt) = raws.get_ptr(0) else {
            errors::invalid_argument(function, "the query is empty".into());
        };
        pg_sys::parse_analyze_fixedparams(
            stmt,
            text.as_ptr(),
            std::ptr::null(),
            0,
            std::ptr::null_mut(),
        )
    };
    // SAFETY: the analyzed query above, read only.
    let (bound, columns_read) = unsafe {
        (
            crate::binding::collect(analyzed),
            crate::binding::columns_read(analyzed),
        )
    };
    // Every name the deparsed text holds is qualified unless in pg_catalog.
    let plan = guard::with_pinned_settings(time_zone, || {
        guard::with_locked_search_path(|| reader.query(analyzed, "the query"))
    });
    ReadQuery {
        plan,
        fields: reader.fields,
        sources: reader.sources,
        bound,
        columns_read,
    }
}

struct Reader {
    function: &'static str,
    fields: HashMap<(String, String), FieldSpec>,
    sources: Vec<pg_sys::Oid>,
    /// The query levels enclosing the one being read, outermost first, the one being read
    /// last: where a CTE `ctelevelsup` levels up is defined (a CTE's query is read as a
    /// level inside the one that defines it).
    levels: Vec<*mut pg_sys::Query>,
    /// Whether the expression being deparsed may hold subqueries (a level's `WHERE`, read
    /// as a semi-join); anywhere else one is refused.
    sublinks_allowed: bool,
}

/// The deparse names of one query level's range table, and the context to deparse in.
struct Scope {
    query: *mut pg_sys::Query,
    names: Vec<Option<String>>,
    context: *mut pg_sys::List,
}

impl Reader {
    fn refuse(&self, what: &str, place: &str) -> ! {
        errors::refused(
            self.function,
            "0A000",
            &format!("{what} ({place}) cannot be kept in a stream table"),
        );
    }

    /// One query level, `place` naming it in errors.
    /// The tree of the query level `q` (inside the levels of `self.levels`).
    fn query(&mut self, q: *mut pg_sys::Query, place: &str) -> Plan {
        self.levels.push(q);
        let plan = self.level(q, place);
        self.levels.pop();
        plan
    }

    fn level(&mut self, q: *mut pg_sys::Query, place: &str) -> Plan {
        // SAFETY: `q` is an analyzed Query of this backend's parse analysis.
        let query = unsafe { &*q };
        if query.commandType != pg_sys::CmdType::CMD_SELECT || !query.utilityStmt.is_null() {
            self.refuse("a statement other than SELECT", place);
        }
        let checks: [(bool, &str); 9] = [
            (
                query.hasTargetSRFs,
                "a set-returning function in the select list",
            ),
            (query.hasDistinctOn, "DISTINCT ON"),
            (query.hasRecursive, "WITH RECURSIVE"),
            (query.hasModifyingCTE, "a data-modifying WITH"),
            (query.hasForUpdate, "FOR UPDATE / FOR SHARE"),
            (!query.limitCount.is_null(), "LIMIT"),
            (!query.limitOffset.is_null(), "OFFSET"),
            (
                !query.groupingSets.is_null(),
                "GROUPING SETS, ROLLUP or CUBE",
            ),
            (!query.rowMarks.is_null(), "a row-locking clause"),
        ];
        for (present, what) in checks {
            if present {
                self.refuse(what, place);
            }
        }
        // SAFETY: a node tree of the analysis.
        if unsafe { pg_sys::contain_volatile_functions(q.cast()) } {
            self.refuse("a volatile function", place);
        }
        let scope = self.scope(q);
        if !query.setOperations.is_null() {
            let plan = self.set_operation(&scope, query.setOperations, place);
            if matches!(plan, Plan::SetOp { .. }) {
                // A distinct set operation's identity holds its output columns by name
                // (spec/stream-tables.md §2), of the types the operation resolved.
                self.by_name(&scope, &plan);
            }
            return plan;
        }
        let from = self.read_from(&scope, place);
        let mut plan = from;
        // SAFETY: the jointree of an analyzed SELECT is a FromExpr.
        let where_ = unsafe { (*query.jointree).quals };
        if !where_.is_null() {
            // SAFETY: an expression tree of the analysis.
            plan = if unsafe { pg_sys::checkExprHasSubLink(where_) } {
                // A semi-join (or anti-join): the tables its subqueries read are sources.
                let reads = self.subquery_reads(where_, place);
                self.sublinks_allowed = true;
                let predicate = self.expr(&scope, where_, "boolean");
                self.sublinks_allowed = false;
                Plan::SemiJoin {
                    input: Box::new(plan),
                    predicate,
                    reads,
                }
            } else {
                Plan::Filter {
                    input: Box::new(plan),
                    predicate: self.expr(&scope, where_, "boolean"),
                }
            };
        }
        let targets = self.targets(&scope, place);
        let aggregating =
            query.hasAggs || !query.groupClause.is_null() || !query.havingQual.is_null();
        if query.hasWindowFuncs {
            if aggregating {
                self.refuse("a window function over aggregates", place);
            }
            if !query.distinctClause.is_null() {
                self.refuse("DISTINCT over window functions", place);
            }
            let partition_by = self.window_partition(&scope, place);
            return Plan::Window {
                input: Box::new(plan),
                partition_by,
                columns: targets,
            };
        }
        if aggregating {
            self.aggregates(&scope, place);
            let group_by = self.group_by(&scope);
            let calls = self.calls(&scope);
            plan = Plan::Aggregate {
                input: Box::new(plan),
                group_by,
                columns: targets,
                calls,
            };
            if !query.havingQual.is_null() {
                plan = Plan::Filter {
                    input: Box::new(plan),
                    predicate: self.expr(&scope, query.havingQual, "boolean"),
                };
            }
        } else {
            plan = Plan::Project {
                input: Box::new(plan),
                columns: targets,
            };
        }
        if !query.distinctClause.is_null() {
            plan = Plan::Distinct {
                input: Box::new(plan),
            };
            self.by_name(&scope, &plan);
        }
        plan
    }

    /// Records the facts of `plan`'s output columns by name (what `DISTINCT` and distinct set
    /// operations identify their rows by), from this level's select list.
    fn by_name(&mut self, scope: &Scope, plan: &Plan) {
        let outputs = plan.outputs();
        // SAFETY: the target list of this level.
        let exprs: Vec<*mut pg_sys::Node> = unsafe {
            pgrx::PgList::<pg_sys::TargetEntry>::from_pg((*scope.query).targetList)
                .iter_ptr()
                .filter(|te| !(**te).resjunk)
                .map(|te| (*te).expr.cast())
                .collect()
        };
        for (output, node) in outputs.iter().zip(exprs) {
            // SAFETY: an expression of this level's target list.
            let (typid, typmod, collid) = unsafe {
                (
                    pg_sys::exprType(node),
                    pg_sys::exprTypmod(node),
                    pg_sys::exprCollation(node),
                )
            };
            let spec = FieldSpec {
                expr: quote_ident(&output.name),
                ty: type_ref(typid, &encoder_collation),
                typmod,
                collation: encoder_collation(collid),
                opclass: OpClass::Default,
            };
            self.fields.insert(
                (quote_ident(&output.name), output.expr.sql_type.clone()),
                spec,
            );
        }
    }

    fn scope(&self, q: *mut pg_sys::Query) -> Scope {
        // SAFETY: the range table of an analyzed Query; the PlannedStmt built here carries
        // only what `deparse_context_for_plan_tree` reads (its range table; no subplans, no
        // append relations).
        unsafe {
            let rtable = (*q).rtable;
            let n = pgrx::PgList::<pg_sys::RangeTblEntry>::from_pg(rtable).len();
            let mut used: *mut pg_sys::Bitmapset = std::ptr::null_mut();
            for i in 1..=n {
                used = pg_sys::bms_add_member(used, i as i32);
            }
            let names = pg_sys::select_rtable_names_for_explain(rtable, used);
            let stmt = pg_sys::palloc0(std::mem::size_of::<pg_sys::PlannedStmt>())
                .cast::<pg_sys::PlannedStmt>();
            (*stmt).type_ = pg_sys::NodeTag::T_PlannedStmt;
            (*stmt).rtable = rtable;
            let context = pg_sys::deparse_context_for_plan_tree(stmt, names);
            let names = pgrx::PgList::<std::ffi::c_char>::from_pg(names)
                .iter_ptr()
                .map(|p| (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into()))
                .collect();
            Scope {
                query: q,
                names,
                context,
            }
        }
    }

    fn rte(&self, scope: &Scope, index: i32) -> *mut pg_sys::RangeTblEntry {
        // SAFETY: `index` is a range table index of this level (from a RangeTblRef).
        unsafe {
            pgrx::PgList::<pg_sys::RangeTblEntry>::from_pg((*scope.query).rtable)
                .get_ptr(index as usize - 1)
                .unwrap_or_else(|| self.refuse("a dangling range table reference", "FROM"))
        }
    }

    fn name(&self, scope: &Scope, index: i32) -> String {
        scope
            .names
            .get(index as usize - 1)
            .cloned()
            .flatten()
            .unwrap_or_else(|| format!("__pgt_from_{index}"))
    }

    /// The `FROM` list: one item, or an inner join of its items (and of `JOIN ... ON`).
    fn read_from(&mut self, scope: &Scope, place: &str) -> Plan {
        // SAFETY: the jointree of an analyzed SELECT is a FromExpr.
        let list = unsafe { (*(*scope.query).jointree).fromlist };
        let items = unsafe { pgrx::PgList::<pg_sys::Node>::from_pg(list) };
        if items.is_empty() {
            self.refuse("a SELECT without FROM", place);
        }
        let mut inputs = Vec::new();
        for node in items.iter_ptr() {
            inputs.push(self.join_item(scope, node, place));
        }
        if inputs.len() == 1 {
            inputs
                .pop()
                .unwrap_or_else(|| self.refuse("an empty FROM", place))
        } else {
            Plan::inner_join(inputs, None)
        }
    }

    fn join_item(&mut self, scope: &Scope, node: *mut pg_sys::Node, place: &str) -> Plan {
        // SAFETY: jointree nodes are RangeTblRef, JoinExpr or FromExpr.
        unsafe {
            if pgrx::is_a(node, pg_sys::NodeTag::T_RangeTblRef) {
                let index = (*node.cast::<pg_sys::RangeTblRef>()).rtindex;
                return self.range(scope, index, place);
            }
            if pgrx::is_a(node, pg_sys::NodeTag::T_JoinExpr) {
                let join = &*node.cast::<pg_sys::JoinExpr>();
                let kind = match join.jointype {
                    pg_sys::JoinType::JOIN_INNER => None,
                    pg_sys::JoinType::JOIN_LEFT => Some(OuterKind::Left),
                    pg_sys::JoinType::JOIN_RIGHT => Some(OuterKind::Right),
                    pg_sys::JoinType::JOIN_FULL => Some(OuterKind::Full),
                    _ => self.refuse("a join other than INNER, LEFT, RIGHT or FULL", place),
                };
                let left = self.join_item(scope, join.larg, place);
                let right = self.join_item(scope, join.rarg, place);
                let condition =
                    (!join.quals.is_null()).then(|| self.expr(scope, join.quals, "boolean"));
                if let Some(kind) = kind {
                    // Nothing tells a function's row of NULLs from no row (spec §2).
                    let mut function = false;
                    for side in [&left, &right] {
                        rowid_ivm::identity::walk(side, &mut |p| {
                            function |= matches!(p, Plan::Function { .. });
                        });
                    }
                    if function {
                        self.refuse("a function in FROM inside an outer join", place);
                    }
                    return Plan::OuterJoin {
                        kind,
                        left: Box::new(left),
                        right: Box::new(right),
                        condition: condition.unwrap_or_else(|| Expr::new("true", "boolean")),
                    };
                }
                return Plan::inner_join(vec![left, right], condition);
            }
        }
        self.refuse("a FROM item of this kind", place)
    }

    fn range(&mut self, scope: &Scope, index: i32, place: &str) -> Plan {
        let rte = self.rte(scope, index);
        let alias = self.name(scope, index);
        let at = format!("{place}, FROM item {}", quote_ident(&alias));
        // SAFETY: a range table entry of this level.
        let entry = unsafe { &*rte };
        // A function in FROM reading the items before it is LATERAL by itself.
        if entry.lateral && entry.rtekind != pg_sys::RTEKind::RTE_FUNCTION {
            self.refuse("LATERAL", &at);
        }
        match entry.rtekind {
            pg_sys::RTEKind::RTE_RELATION => self.scan(entry, &alias, &at),
            pg_sys::RTEKind::RTE_SUBQUERY => {
                let inner = self.query(entry.subquery, &format!("the subquery {}", alias));
                Plan::Subquery {
                    alias,
                    columns: self.colnames(entry),
                    input: Box::new(inner),
                }
            }
            pg_sys::RTEKind::RTE_CTE => {
                // The level that defines it: this one, or one enclosing it (a CTE that
                // reads another of the same WITH list, a subquery reading its query's CTE).
                let up = usize::try_from(entry.ctelevelsup).unwrap_or(usize::MAX);
                let Some(depth) = self.levels.len().checked_sub(up.saturating_add(1)) else {
                    self.refuse("a CTE that is not defined", &at);
                };
                let cte = self.cte(self.levels[depth], entry, &at);
                // Its query is read as a level of the one defining it, as PostgreSQL analyzed it.
                let inside = self.levels.split_off(depth + 1);
                let inner = self.query(cte, &format!("the CTE {}", alias));
                self.levels.extend(inside);
                Plan::Subquery {
                    alias,
                    columns: self.colnames(entry),
                    input: Box::new(inner),
                }
            }
            pg_sys::RTEKind::RTE_FUNCTION => self.function(scope, entry, &alias, &at),
            pg_sys::RTEKind::RTE_VALUES => self.refuse("VALUES in FROM", &at),
            pg_sys::RTEKind::RTE_TABLEFUNC => self.refuse("XMLTABLE or JSON_TABLE", &at),
            _ => self.refuse("a FROM item of this kind", &at),
        }
    }

    /// A set-returning function in `FROM` returning one column (a base type, not a row),
    /// `WITH ORDINALITY` or not; its columns are identity fields of its rows (spec §2).
    fn function(
        &mut self,
        scope: &Scope,
        entry: &pg_sys::RangeTblEntry,
        alias: &str,
        at: &str,
    ) -> Plan {
        // SAFETY: the function list of an analyzed RTE_FUNCTION entry: RangeTblFunction nodes.
        let functions: Vec<*mut pg_sys::RangeTblFunction> = unsafe {
            pgrx::PgList::<pg_sys::RangeTblFunction>::from_pg(entry.functions)
                .iter_ptr()
                .collect()
        };
        let [function] = functions.as_slice() else {
            self.refuse("ROWS FROM with several functions", at);
        };
        // SAFETY: a RangeTblFunction of the entry; its expression a node of the analysis.
        let (node, colcount, coldefs) = unsafe {
            (
                (**function).funcexpr,
                (**function).funccolcount,
                !(**function).funccolnames.is_null(),
            )
        };
        // SAFETY: the function's expression.
        let (typid, collid) = unsafe { (pg_sys::exprType(node), pg_sys::exprCollation(node)) };
        // SAFETY: a type OID the analysis resolved.
        let composite = unsafe { pg_sys::type_is_rowtype(typid) };
        if coldefs || colcount != 1 || composite {
            self.refuse("a function in FROM returning rows of several columns", at);
        }
        let call = self.expr(scope, node, "");
        let names = self.colnames(entry);
        let a = quote_ident(alias);
        let mut columns = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let ordinality = entry.funcordinality && i + 1 == names.len();
            let spec = FieldSpec {
                expr: String::new(),
                ty: type_ref(
                    if ordinality { pg_sys::INT8OID } else { typid },
                    &encoder_collation,
                ),
                typmod: -1,
                collation: if ordinality {
                    None
                } else {
                    encoder_collation(collid)
                },
                opclass: OpClass::Default,
            };
            let expr = self.field(&format!("{a}.{}", quote_ident(name)), &spec);
            columns.push(Output {
                name: name.clone(),
                expr,
            });
        }
        Plan::Function {
            alias: alias.to_string(),
            call,
            ordinality: entry.funcordinality,
            columns,
        }
    }

    fn colnames(&self, entry: &pg_sys::RangeTblEntry) -> Vec<String> {
        // SAFETY: `eref` of an analyzed entry: an Alias whose colnames are String nodes.
        unsafe {
            pgrx::PgList::<pg_sys::Node>::from_pg((*entry.eref).colnames)
                .iter_ptr()
                .map(|n| string_node(n))
                .collect()
        }
    }

    /// The query of the CTE `entry` names, in the CTE list of `level`.
    fn cte(
        &self,
        level: *mut pg_sys::Query,
        entry: &pg_sys::RangeTblEntry,
        at: &str,
    ) -> *mut pg_sys::Query {
        // SAFETY: the CTE list of an analyzed level; `ctename` is a NUL-terminated name.
        unsafe {
            let wanted = CStr::from_ptr(entry.ctename);
            for cte in pgrx::PgList::<pg_sys::CommonTableExpr>::from_pg((*level).cteList).iter_ptr()
            {
                if CStr::from_ptr((*cte).ctename) == wanted {
                    if (*cte).cterecursive {
                        self.refuse("a recursive CTE", at);
                    }
                    return (*cte).ctequery.cast();
                }
            }
        }
        self.refuse("a CTE that is not defined", at)
    }

    /// The tables a `WHERE`'s subqueries read, at any depth, each once, schema-qualified and
    /// quoted: registered as sources under the checks a scan's table passes.
    fn subquery_reads(&mut self, where_: *mut pg_sys::Node, place: &str) -> Vec<String> {
        let at = format!("{place}, a subquery in WHERE");
        let mut found = SubqueryTables::default();
        // SAFETY: a walk of an analyzed expression tree; the walker only records.
        unsafe {
            subquery_tables(where_, std::ptr::from_mut(&mut found).cast());
        }
        if let Some(what) = found.refused {
            self.refuse(what, &at);
        }
        let mut reads: Vec<String> = Vec::new();
        for rte in found.relations {
            // SAFETY: a range table entry the walk found.
            let entry = unsafe { &*rte };
            if !entry.tablesample.is_null() {
                self.refuse("TABLESAMPLE", &at);
            }
            let (_, relation) = self.source(entry, &at);
            if !reads.contains(&relation) {
                reads.push(relation);
            }
        }
        reads
    }

    /// A table read as a source: a plain table (or a stream table, whose identity version the
    /// running library must read), registered among the sources; its OID and its name,
    /// schema-qualified and quoted.
    fn source(&mut self, entry: &pg_sys::RangeTblEntry, at: &str) -> (pg_sys::Oid, String) {
        let relid = entry.relid;
        let kind = entry.relkind as u8;
        if kind != b'r' {
            let what = match kind {
                b'v' => "a view",
                b'm' => "a materialized view",
                b'f' => "a foreign table",
                b'p' => "a partitioned table",
                _ => "a relation of this kind",
            };
            self.refuse(what, at);
        }
        let Some(facts) = relation_facts(relid) else {
            self.refuse("a relation that is gone", at);
        };
        if !self.sources.contains(&relid) {
            self.sources.push(relid);
        }
        if let Some(upstream) = crate::stream_graph::upstream(relid) {
            crate::stream_graph::check_versions(self.function, &upstream);
        }
        let relation = format!(
            "{}.{}",
            quote_ident(&facts.namespace),
            quote_ident(&facts.relname)
        );
        (relid, relation)
    }

    fn scan(&mut self, entry: &pg_sys::RangeTblEntry, alias: &str, at: &str) -> Plan {
        if !entry.tablesample.is_null() {
            self.refuse("TABLESAMPLE", at);
        }
        let (relid, relation) = self.source(entry, at);
        let a = quote_ident(alias);
        let ctx = server_context();
        let columns: Vec<FieldSpec> = all_columns(relid);
        let outputs = columns
            .iter()
            .map(|c| Output {
                name: c.expr.clone(),
                expr: Expr::new(&format!("{a}.{}", quote_ident(&c.expr)), c.ty.name()),
            })
            .collect();
        if let Some(upstream) = crate::stream_graph::upstream(relid) {
            // Another stream table: its rows keep the identity it stores (§7).
            let Some(domain) = rowid_codec::Domain::from_name(&upstream.domain) else {
                self.refuse("a stream table whose catalog names an unknown domain", at);
            };
            return Plan::Scan {
                relation,
                alias: alias.to_string(),
                columns: outputs,
                key: SourceKey::Stored(StoredIdentity {
                    column: Expr::new(&format!("{a}.{}", quote_ident(ROW_ID)), "bytea"),
                    domain,
                    unique: upstream.unique,
                    max_len: upstream.max_len,
                }),
            };
        }
        let key = match choose_scan_key(&index_candidates(relid), &ctx) {
            Ok(key) => {
                let mut exprs = Vec::with_capacity(key.columns.len());
                for name in &key.columns {
                    let Some(spec) = columns.iter().find(|c| &c.expr == name) else {
                        self.refuse("a key column that is not a plain column", at);
                    };
                    exprs.push(self.field(&format!("{a}.{}", quote_ident(name)), spec));
                }
                SourceKey::Key(exprs)
            }
            Err(_) => {
                if let Err(r) = resolve_schema(rowid_codec::Domain::KeylessRow, &columns, &ctx) {
                    match r.0.first() {
                        Some(first) => errors::rejected(self.function, first),
                        None => self.refuse("a keyless source", at),
                    }
                }
                SourceKey::Keyless(
                    columns
                        .iter()
                        .map(|c| self.field(&format!("{a}.{}", quote_ident(&c.expr)), c))
                        .collect(),
                )
            }
        };
        Plan::Scan {
            relation,
            alias: alias.to_string(),
            columns: outputs,
            key,
        }
    }

    /// A value field `sql` with `spec`'s facts, recorded for the identity checks.
    fn field(&mut self, sql: &str, spec: &FieldSpec) -> Expr {
        let expr = Expr::new(sql, spec.ty.name());
        let mut spec = spec.clone();
        spec.expr = sql.to_string();
        self.fields
            .insert((expr.sql.clone(), expr.sql_type.clone()), spec);
        expr
    }

    /// A value expression: its deparsed text and type, its facts recorded.
    fn value(&mut self, scope: &Scope, node: *mut pg_sys::Node) -> Expr {
        // SAFETY: an expression node of this level.
        let (typid, typmod, collid) = unsafe {
            (
                pg_sys::exprType(node),
                pg_sys::exprTypmod(node),
                pg_sys::exprCollation(node),
            )
        };
        let sql = self.deparse(scope, node);
        let spec = FieldSpec {
            expr: sql.clone(),
            ty: type_ref(typid, &encoder_collation),
            typmod,
            collation: encoder_collation(collid),
            opclass: OpClass::Default,
        };
        self.field(&sql, &spec)
    }

    fn expr(&mut self, scope: &Scope, node: *mut pg_sys::Node, ty: &str) -> Expr {
        Expr::new(&self.deparse(scope, node), ty)
    }

    fn deparse(&self, scope: &Scope, node: *mut pg_sys::Node) -> String {
        // SAFETY: an expression tree of the analysis.
        if !self.sublinks_allowed && unsafe { pg_sys::checkExprHasSubLink(node) } {
            self.refuse(
                "a subquery in an expression other than a WHERE (the select list, HAVING, \
                 JOIN ... ON, a function in FROM)",
                "the query",
            );
        }
        // SAFETY: an expression of this level, its join alias variables (and on 18 its
        // grouped expressions) replaced by what they stand for (the deparse context has no
        // join or group scopes), deparsed in the context
        // built for this level's range table.
        unsafe {
            // PostgreSQL 18 points grouped expressions at a GROUP range table entry.
            #[cfg(feature = "pg18")]
            let node = if (*scope.query).hasGroupRTE {
                pg_sys::flatten_group_exprs(std::ptr::null_mut(), scope.query, node)
            } else {
                node
            };
            #[cfg(feature = "pg15")]
            let flat = pg_sys::flatten_join_alias_vars(scope.query, node);
            #[cfg(not(feature = "pg15"))]
            let flat = pg_sys::flatten_join_alias_vars(std::ptr::null_mut(), scope.query, node);
            let text = pg_sys::deparse_expression(flat, scope.context, true, false);
            CStr::from_ptr(text).to_string_lossy().into_owned()
        }
    }

    /// The entries of this level's select list, without the columns only `ORDER BY` or
    /// `GROUP BY` added.
    fn visible_targets(scope: &Scope) -> Vec<*mut pg_sys::TargetEntry> {
        // SAFETY: the target list of this level.
        unsafe {
            pgrx::PgList::<pg_sys::TargetEntry>::from_pg((*scope.query).targetList)
                .iter_ptr()
                .filter(|te| !(**te).resjunk)
                .collect()
        }
    }

    /// The select list (without the columns only `ORDER BY` or `GROUP BY` added).
    fn targets(&mut self, scope: &Scope, place: &str) -> Vec<Output> {
        let mut out = Vec::new();
        // SAFETY: entries of the target list of this level.
        unsafe {
            for te in Self::visible_targets(scope) {
                let name = if (*te).resname.is_null() {
                    format!("column{}", (*te).resno)
                } else {
                    CStr::from_ptr((*te).resname).to_string_lossy().into_owned()
                };
                if name.starts_with("__pgt_") {
                    self.refuse(
                        &format!("an output column named {}", quote_ident(&name)),
                        place,
                    );
                }
                let node = (*te).expr.cast::<pg_sys::Node>();
                let expr = if pgrx::is_a(node, pg_sys::NodeTag::T_WindowFunc) {
                    self.window_call(scope, node.cast(), place)
                } else if pg_sys::contain_window_function(node) {
                    self.refuse("an expression over a window function", place)
                } else {
                    self.value(scope, node)
                };
                out.push(Output { name, expr });
            }
        }
        out
    }

    /// A window function call, `f(args) OVER (PARTITION BY ... ORDER BY ...)`, rendered from
    /// its parts: the server's deparser needs the query's window clauses, which the range
    /// table's deparse context does not have. The call is deparsed as a plain call of the
    /// same function and arguments, the `OVER` clause from the window clause.
    ///
    /// # Safety
    ///
    /// `wf` is a `WindowFunc` of this level's target list.
    unsafe fn window_call(
        &mut self,
        scope: &Scope,
        wf: *mut pg_sys::WindowFunc,
        place: &str,
    ) -> Expr {
        // SAFETY: (the caller's) a WindowFunc of the analysis; the FuncExpr built here is
        // palloc'd in the current memory context and only deparsed.
        unsafe {
            let w = &*wf;
            if !w.aggfilter.is_null() {
                self.refuse("FILTER on a window function", place);
            }
            let call =
                pg_sys::palloc0(std::mem::size_of::<pg_sys::FuncExpr>()).cast::<pg_sys::FuncExpr>();
            (*call).xpr.type_ = pg_sys::NodeTag::T_FuncExpr;
            (*call).funcid = w.winfnoid;
            (*call).funcresulttype = w.wintype;
            (*call).funcformat = pg_sys::CoercionForm::COERCE_EXPLICIT_CALL;
            (*call).funccollid = w.wincollid;
            (*call).inputcollid = w.inputcollid;
            (*call).args = w.args;
            (*call).location = -1;
            let mut text = self.deparse(scope, call.cast());
            if w.winstar {
                text = format!("{}(*)", text.trim_end_matches("()"));
            }
            let over = self.window_spec(scope, w.winref, place);
            let sql = format!("{text} OVER ({over})");
            let spec = FieldSpec {
                expr: sql.clone(),
                ty: type_ref(w.wintype, &encoder_collation),
                typmod: pg_sys::exprTypmod(wf.cast()),
                collation: encoder_collation(w.wincollid),
                opclass: OpClass::Default,
            };
            self.field(&sql, &spec)
        }
    }

    /// The window clause `winref` of this level as `PARTITION BY ... ORDER BY ...`: only the
    /// default frame (a frame clause is refused), each `ORDER BY` key ascending or
    /// descending by its type's default order, its NULLs placed explicitly.
    fn window_spec(&mut self, scope: &Scope, winref: pg_sys::Index, place: &str) -> String {
        let clause = self.window_clause(scope, winref, place);
        // SAFETY: a WindowClause of this level, its sort-group clauses pointing into this
        // level's target list; the type cache entry is the server's, read only.
        unsafe {
            let wc = &*clause;
            if wc.frameOptions != pg_sys::FRAMEOPTION_DEFAULTS as i32 {
                self.refuse(
                    "a window frame clause (ROWS, RANGE, GROUPS or EXCLUDE)",
                    place,
                );
            }
            let partition: Vec<String> = self
                .sort_group_exprs(scope, wc.partitionClause)
                .into_iter()
                .map(|(_, node)| self.deparse(scope, node))
                .collect();
            let mut order = Vec::new();
            for (clause, node) in self.sort_group_exprs(scope, wc.orderClause) {
                let entry = pg_sys::lookup_type_cache(
                    pg_sys::exprType(node),
                    (pg_sys::TYPECACHE_LT_OPR | pg_sys::TYPECACHE_GT_OPR) as i32,
                );
                let direction = if (*clause).sortop == (*entry).lt_opr {
                    "ASC"
                } else if (*clause).sortop == (*entry).gt_opr {
                    "DESC"
                } else {
                    self.refuse("a window ORDER BY with an operator (USING)", place)
                };
                let nulls = if (*clause).nulls_first {
                    "NULLS FIRST"
                } else {
                    "NULLS LAST"
                };
                order.push(format!("{} {direction} {nulls}", self.deparse(scope, node)));
            }
            let mut spec = Vec::new();
            if !partition.is_empty() {
                spec.push(format!("PARTITION BY {}", partition.join(", ")));
            }
            if !order.is_empty() {
                spec.push(format!("ORDER BY {}", order.join(", ")));
            }
            spec.join(" ")
        }
    }

    fn window_clause(
        &self,
        scope: &Scope,
        winref: pg_sys::Index,
        place: &str,
    ) -> *mut pg_sys::WindowClause {
        // SAFETY: the window clause list of this level.
        unsafe {
            pgrx::PgList::<pg_sys::WindowClause>::from_pg((*scope.query).windowClause)
                .iter_ptr()
                .find(|wc| (**wc).winref == winref)
                .unwrap_or_else(|| self.refuse("a window function without its window", place))
        }
    }

    /// The sort-group clauses of `list` with the target list expressions they point at.
    fn sort_group_exprs(
        &self,
        scope: &Scope,
        list: *mut pg_sys::List,
    ) -> Vec<(*mut pg_sys::SortGroupClause, *mut pg_sys::Node)> {
        // SAFETY: a sort-group clause list and the target list of this level.
        unsafe {
            let tlist = pgrx::PgList::<pg_sys::TargetEntry>::from_pg((*scope.query).targetList);
            pgrx::PgList::<pg_sys::SortGroupClause>::from_pg(list)
                .iter_ptr()
                .filter_map(|clause| {
                    tlist
                        .iter_ptr()
                        .find(|te| (**te).ressortgroupref == (*clause).tleSortGroupRef)
                        .map(|te| (clause, (*te).expr.cast::<pg_sys::Node>()))
                })
                .collect()
        }
    }

    /// The one `PARTITION BY` list of this level's windows, as identity fields (a window
    /// identity holds the partition's values, spec/stream-tables.md §2); windows over
    /// different lists are refused.
    fn window_partition(&mut self, scope: &Scope, place: &str) -> Vec<Expr> {
        // SAFETY: the window clause list of this level.
        let clauses: Vec<*mut pg_sys::WindowClause> = unsafe {
            pgrx::PgList::<pg_sys::WindowClause>::from_pg((*scope.query).windowClause)
                .iter_ptr()
                .collect()
        };
        let mut lists: Vec<Vec<Expr>> = Vec::new();
        for clause in clauses {
            // SAFETY: a WindowClause of this level.
            let partition = unsafe { (*clause).partitionClause };
            let list: Vec<Expr> = self
                .sort_group_exprs(scope, partition)
                .into_iter()
                .map(|(_, node)| self.value(scope, node))
                .collect();
            lists.push(list);
        }
        let first = lists.first().cloned().unwrap_or_default();
        if lists.iter().any(|l| *l != first) {
            self.refuse("window functions over different PARTITION BY lists", place);
        }
        first
    }

    /// What each output column of this aggregate level computes: a function of the group
    /// expressions, one aggregate call the delta rules know (by its function in
    /// `pg_catalog` and its argument's type), or anything else.
    fn calls(&mut self, scope: &Scope) -> Vec<Call> {
        let mut out = Vec::new();
        // SAFETY: entries of the target list of this level.
        unsafe {
            for te in Self::visible_targets(scope) {
                let node = (*te).expr.cast::<pg_sys::Node>();
                if !pg_sys::contain_agg_clause(node) {
                    out.push(Call::Group);
                    continue;
                }
                out.push(self.call(scope, node).unwrap_or(Call::Other));
            }
        }
        out
    }

    /// A bare call of an aggregate the delta rules know, or `None`.
    fn call(&mut self, scope: &Scope, node: *mut pg_sys::Node) -> Option<Call> {
        // SAFETY: an expression of this level's target list; an Aggref's args are
        // TargetEntry nodes.
        unsafe {
            if !pgrx::is_a(node, pg_sys::NodeTag::T_Aggref) {
                return None;
            }
            let agg = &*node.cast::<pg_sys::Aggref>();
            if !agg.aggdistinct.is_null() || !agg.aggorder.is_null() || !agg.aggfilter.is_null() {
                return None;
            }
            let name: String = spi::one(
                &format!(
                    "SELECT proname::pg_catalog.text FROM pg_catalog.pg_proc                      WHERE oid OPERATOR(pg_catalog.=) {}                        AND pronamespace OPERATOR(pg_catalog.=) 11",
                    u32::from(agg.aggfnoid)
                ),
                &[],
            )?;
            let func = match name.as_str() {
                "count" => AggregateFunc::Count,
                "sum" => AggregateFunc::Sum,
                "avg" => AggregateFunc::Avg,
                "min" => AggregateFunc::Min,
                "max" => AggregateFunc::Max,
                "bool_and" | "every" => AggregateFunc::BoolAnd,
                "bool_or" => AggregateFunc::BoolOr,
                _ => return None,
            };
            let args = pgrx::PgList::<pg_sys::TargetEntry>::from_pg(agg.args);
            if agg.aggstar || args.is_empty() {
                return (func == AggregateFunc::Count).then_some(Call::Aggregate {
                    func,
                    arg: None,
                    arg_class: ArgClass::Other,
                });
            }
            if args.len() != 1 {
                return None;
            }
            let arg = args.get_ptr(0)?;
            let arg_node = (*arg).expr.cast::<pg_sys::Node>();
            let arg_class = match pg_sys::exprType(arg_node) {
                pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID => ArgClass::Integer,
                pg_sys::NUMERICOID => ArgClass::Numeric,
                _ => ArgClass::Other,
            };
            Some(Call::Aggregate {
                func,
                arg: Some(self.expr(scope, arg_node, "")),
                arg_class,
            })
        }
    }

    /// The `GROUP BY` expressions, in written order.
    fn group_by(&mut self, scope: &Scope) -> Vec<Expr> {
        let mut out = Vec::new();
        // SAFETY: the group clause and target list of this level.
        unsafe {
            let tlist = pgrx::PgList::<pg_sys::TargetEntry>::from_pg((*scope.query).targetList);
            for clause in
                pgrx::PgList::<pg_sys::SortGroupClause>::from_pg((*scope.query).groupClause)
                    .iter_ptr()
            {
                let sgref = (*clause).tleSortGroupRef;
                if let Some(te) = tlist.iter_ptr().find(|te| (**te).ressortgroupref == sgref) {
                    out.push(self.value(scope, (*te).expr.cast()));
                }
            }
        }
        out
    }

    /// Refuses aggregates the tree has no operator for.
    fn aggregates(&self, scope: &Scope, place: &str) {
        // SAFETY: the target list and HAVING of this level; pull_var_clause returns the
        // aggregates (and variables) it finds, without recursing into aggregates.
        unsafe {
            let mut nodes = vec![(*scope.query).targetList.cast::<pg_sys::Node>()];
            nodes.push((*scope.query).havingQual);
            for n in nodes.into_iter().filter(|n| !n.is_null()) {
                let found = pg_sys::pull_var_clause(n, pg_sys::PVC_INCLUDE_AGGREGATES as i32);
                for node in pgrx::PgList::<pg_sys::Node>::from_pg(found).iter_ptr() {
                    if !pgrx::is_a(node, pg_sys::NodeTag::T_Aggref) {
                        continue;
                    }
                    let agg = &*node.cast::<pg_sys::Aggref>();
                    let name: Option<String> = spi::one(
                        &format!(
                            "SELECT proname::pg_catalog.text FROM pg_catalog.pg_proc \
                             WHERE oid OPERATOR(pg_catalog.=) {} \
                               AND pronamespace OPERATOR(pg_catalog.=) 11",
                            u32::from(agg.aggfnoid)
                        ),
                        &[],
                    );
                    let Some(name) = name.filter(|n| AGGREGATES.contains(&n.as_str())) else {
                        let shown: Option<String> = spi::one(
                            &format!(
                                "SELECT {}::pg_catalog.regprocedure::pg_catalog.text",
                                u32::from(agg.aggfnoid)
                            ),
                            &[],
                        );
                        self.refuse(
                            &format!("the aggregate {}", shown.unwrap_or_default()),
                            place,
                        );
                    };
                    // `DISTINCT` inside: no additive rule (`call` gives `Call::Other`); the
                    // groups a change touches are recomputed.
                    if !agg.aggorder.is_null() {
                        self.refuse(&format!("ORDER BY inside {name}(...)"), place);
                    }
                    if !agg.aggfilter.is_null() {
                        self.refuse(&format!("FILTER on {name}(...)"), place);
                    }
                }
            }
        }
    }

    /// `UNION [ALL]`, `INTERSECT [ALL]`, `EXCEPT [ALL]` of this level's subqueries.
    fn set_operation(&mut self, scope: &Scope, node: *mut pg_sys::Node, place: &str) -> Plan {
        // SAFETY: a set operation tree: SetOperationStmt nodes over RangeTblRefs to this
        // level's subquery entries.
        unsafe {
            if pgrx::is_a(node, pg_sys::NodeTag::T_RangeTblRef) {
                let index = (*node.cast::<pg_sys::RangeTblRef>()).rtindex;
                let entry = &*self.rte(scope, index);
                return self.query(entry.subquery, &format!("{place}, branch {index}"));
            }
            let op = &*node.cast::<pg_sys::SetOperationStmt>();
            let left = self.set_operation(scope, op.larg, place);
            let right = self.set_operation(scope, op.rarg, place);
            let kind = match op.op {
                pg_sys::SetOperation::SETOP_UNION => SetOpKind::Union,
                pg_sys::SetOperation::SETOP_INTERSECT => SetOpKind::Intersect,
                pg_sys::SetOperation::SETOP_EXCEPT => SetOpKind::Except,
                _ => self.refuse("a set operation of this kind", place),
            };
            if kind == SetOpKind::Union && op.all {
                // UNION ALL of UNION ALLs is one UNION ALL of every branch, in order.
                let mut branches = Vec::new();
                for side in [left, right] {
                    match side {
                        Plan::UnionAll { branches: inner } => branches.extend(inner),
                        other => branches.push(other),
                    }
                }
                return Plan::UnionAll { branches };
            }
            Plan::SetOp {
                op: kind,
                all: op.all,
                branches: vec![left, right],
            }
        }
    }
}

/// The text of a `String` node (PostgreSQL 15 and later: `sval`).
///
/// # Safety
/// `node` must be a `String` node.
unsafe fn string_node(node: *mut pg_sys::Node) -> String {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let s = &*node.cast::<pg_sys::String>();
        CStr::from_ptr(s.sval).to_string_lossy().into_owned()
    }
}

/// What a walk of a `WHERE`'s subqueries found: the range table entries of the tables they
/// read, and the first thing in them a stream table cannot keep.
#[derive(Default)]
struct SubqueryTables {
    relations: Vec<*mut pg_sys::RangeTblEntry>,
    refused: Option<&'static str>,
}

/// A tree walker (`expression_tree_walker`, `query_tree_walker`) recording, into the
/// [`SubqueryTables`] `context` points to, the tables of every query under `node`: the
/// subqueries of the expression, theirs, their `FROM` subqueries and their CTEs. It only
/// records (nothing here may raise an error through the server's walker frames).
///
/// # Safety
///
/// `node` is an analyzed tree (or NULL); `context` points to a live [`SubqueryTables`].
unsafe extern "C-unwind" fn subquery_tables(
    node: *mut pg_sys::Node,
    context: *mut std::ffi::c_void,
) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: the caller's contract.
    unsafe {
        if pgrx::is_a(node, pg_sys::NodeTag::T_Query) {
            let query = node.cast::<pg_sys::Query>();
            let found = &mut *context.cast::<SubqueryTables>();
            if !(*query).rowMarks.is_null() {
                found.refused.get_or_insert("FOR UPDATE / FOR SHARE");
            }
            for rte in pgrx::PgList::<pg_sys::RangeTblEntry>::from_pg((*query).rtable).iter_ptr() {
                match (*rte).rtekind {
                    pg_sys::RTEKind::RTE_RELATION => found.relations.push(rte),
                    // Its query is the enclosing level's, which only that level reads.
                    pg_sys::RTEKind::RTE_CTE if (*rte).ctelevelsup > 0 => {
                        found
                            .refused
                            .get_or_insert("a CTE of an enclosing query read in a subquery");
                    }
                    _ => {}
                }
            }
            return pg_sys::query_tree_walker(query, Some(subquery_tables), context, 0);
        }
        pg_sys::expression_tree_walker(node, Some(subquery_tables), context)
    }
}
