//! The operator tree of a stream table's query (spec/stream-tables.md §1).
//!
//! The extension builds it from PostgreSQL's own analysis of the query: every name is
//! resolved and every expression is PostgreSQL's deparsed, schema-qualified text with its
//! type. Nothing here parses SQL.

use rowid_registry::sql::quote_ident;

/// An SQL expression as the server deparsed it, with its type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    /// The expression's text, its names qualified by the relation aliases of the query.
    pub sql: String,
    /// Its type, as `format_type` prints it.
    pub sql_type: String,
}

impl Expr {
    /// An expression `sql` of type `sql_type`.
    pub fn new(sql: &str, sql_type: &str) -> Expr {
        Expr {
            sql: sql.to_string(),
            sql_type: sql_type.to_string(),
        }
    }
}

/// An output column: its name and the expression computing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The column's name in the stream table.
    pub name: String,
    /// What computes it, over the input's columns.
    pub expr: Expr,
}

/// What identifies the rows of a source table (its identity schema).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceKey {
    /// SCAN_KEY: the key columns of its eligible identity index, in index key order.
    Key(Vec<Expr>),
    /// KEYLESS_ROW: every column but generated ones, in `attnum` order (equal rows share it).
    Keyless(Vec<Expr>),
    /// Another stream table's rows: the identity it stores in `__pgt_row_id`, passed through
    /// byte for byte (spec/stream-tables.md §2, "downstream stream tables").
    Stored(StoredIdentity),
}

/// The identity an upstream stream table stores, as its catalog records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredIdentity {
    /// The stored column (`alias.__pgt_row_id`), of type `bytea`.
    pub column: Expr,
    /// The domain of the upstream's identity.
    pub domain: rowid_codec::Domain,
    /// Whether no two of the upstream's rows share it.
    pub unique: bool,
    /// The upstream's worst-case identity length (`None`: unbounded).
    pub max_len: Option<usize>,
}

/// The set operations that merge equal rows (or count them, with `ALL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOpKind {
    /// `UNION` (distinct; `UNION ALL` is [`Plan::UnionAll`]).
    Union,
    /// `INTERSECT [ALL]`.
    Intersect,
    /// `EXCEPT [ALL]`.
    Except,
}

impl SetOpKind {
    /// The SQL keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            SetOpKind::Union => "UNION",
            SetOpKind::Intersect => "INTERSECT",
            SetOpKind::Except => "EXCEPT",
        }
    }
}

/// The outer joins: which side's rows are kept when nothing matches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OuterKind {
    /// `LEFT [OUTER] JOIN`: every left row, the right side NULL where none matches.
    Left,
    /// `RIGHT [OUTER] JOIN`: every right row, the left side NULL where none matches.
    Right,
    /// `FULL [OUTER] JOIN`: both.
    Full,
}

impl OuterKind {
    /// The SQL keywords.
    pub fn keyword(self) -> &'static str {
        match self {
            OuterKind::Left => "LEFT JOIN",
            OuterKind::Right => "RIGHT JOIN",
            OuterKind::Full => "FULL JOIN",
        }
    }

    /// Whether the left side's columns (and identity) are NULL in a row without a match.
    pub fn left_nullable(self) -> bool {
        matches!(self, OuterKind::Right | OuterKind::Full)
    }

    /// Whether the right side's columns (and identity) are NULL in a row without a match.
    pub fn right_nullable(self) -> bool {
        matches!(self, OuterKind::Left | OuterKind::Full)
    }
}

/// An aggregate function whose change a stream table can apply without reading the group's
/// rows again (spec/stream-tables.md §5.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregateFunc {
    /// `count(*)` (no argument) or `count(x)`.
    Count,
    /// `sum(x)`.
    Sum,
    /// `avg(x)`.
    Avg,
    /// `min(x)`.
    Min,
    /// `max(x)`.
    Max,
    /// `bool_and(x)`.
    BoolAnd,
    /// `bool_or(x)`.
    BoolOr,
}

/// The argument types whose `sum` and `avg` PostgreSQL computes exactly: the result of
/// adding a change to a stored sum is what recomputation gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgClass {
    /// `smallint`, `integer`, `bigint`: exact integer sums.
    Integer,
    /// `numeric`: exact, its result's scale the largest scale summed.
    Numeric,
    /// Any other type (`float4`, `float8`, `money`, `interval`, ...).
    Other,
}

/// What an aggregate level's output column computes, as far as a delta rule needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// No aggregate inside: a function of the group expressions.
    Group,
    /// One aggregate call and nothing around it, without `DISTINCT`, `ORDER BY` or `FILTER`.
    Aggregate {
        /// The function.
        func: AggregateFunc,
        /// Its argument (none: `count(*)`).
        arg: Option<Expr>,
        /// The argument's type class.
        arg_class: ArgClass,
    },
    /// Anything else: an expression over aggregates, another aggregate.
    Other,
}

/// One operator and its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// A source table's rows.
    Scan {
        /// The relation, schema-qualified and quoted.
        relation: String,
        /// Its alias in the query.
        alias: String,
        /// Its columns (the query's references to them).
        columns: Vec<Output>,
        /// What identifies its rows.
        key: SourceKey,
    },
    /// A subquery in `FROM` or a reference to a non-recursive CTE: its query's tree, in place,
    /// under the name the outer query gives it. Its rows keep their identity (pass-through).
    Subquery {
        /// Its name in the outer query (the `FROM` alias, or the CTE's name).
        alias: String,
        /// The names the outer query sees its columns by, in order.
        columns: Vec<String>,
        /// Its query.
        input: Box<Plan>,
    },
    /// A set-returning function in `FROM` (`unnest`, `jsonb_array_elements`, ...), `LATERAL`
    /// over the items before it when its arguments read them: its rows for each row of those.
    Function {
        /// Its name in the query.
        alias: String,
        /// The call, as the server deparsed it.
        call: Expr,
        /// `WITH ORDINALITY`: its last column numbers its rows from 1.
        ordinality: bool,
        /// Its columns (the query's references to them), the ordinality last.
        columns: Vec<Output>,
    },
    /// The input rows a predicate keeps (`WHERE`, `HAVING`).
    Filter {
        /// The input.
        input: Box<Plan>,
        /// The predicate.
        predicate: Expr,
    },
    /// The input rows a `WHERE` holding subqueries keeps (`EXISTS`, `IN`, `NOT EXISTS`,
    /// `NOT IN`, `= ANY`, `<> ALL`, a scalar subquery): a semi-join, or an anti-join, of the
    /// input with what the subqueries read. Each input row is kept once or not at all, with
    /// its identity (spec/stream-tables.md §2).
    SemiJoin {
        /// The input.
        input: Box<Plan>,
        /// The whole `WHERE`, its subqueries in it, as the server deparsed it.
        predicate: Expr,
        /// The tables the subqueries read, schema-qualified and quoted, each once: a change
        /// to one of them can keep or drop any input row.
        reads: Vec<String>,
    },
    /// One output row per input row (the target list).
    Project {
        /// The input.
        input: Box<Plan>,
        /// The output columns.
        columns: Vec<Output>,
    },
    /// An inner join of two or more inputs, in `FROM` order.
    Join {
        /// The inputs, in `FROM` order.
        inputs: Vec<Plan>,
        /// The join condition, if any (none: a cross join).
        condition: Option<Expr>,
    },
    /// An outer join of two inputs (spec/stream-tables.md §2: its identity is `JOIN_KEY` of
    /// both sides' identities, the side a row has no match on a NULL child). Not flattened
    /// into an inner [`Plan::Join`]: it is one of its inputs.
    OuterJoin {
        /// Which side is kept without a match.
        kind: OuterKind,
        /// The left input.
        left: Box<Plan>,
        /// The right input.
        right: Box<Plan>,
        /// The join condition (`ON`; `USING` and `NATURAL` as the equalities they mean).
        condition: Expr,
    },
    /// Window functions over the input's rows (the target list of a level with `OVER`): one
    /// output row per input row, every window over the same `PARTITION BY` list.
    Window {
        /// The input.
        input: Box<Plan>,
        /// The `PARTITION BY` expressions, in written order (empty: one partition).
        partition_by: Vec<Expr>,
        /// The output columns, window calls with their `OVER (...)` among them.
        columns: Vec<Output>,
    },
    /// Groups and their aggregates; without `GROUP BY` exactly one row.
    Aggregate {
        /// The input.
        input: Box<Plan>,
        /// The `GROUP BY` expressions, in written order (empty: no `GROUP BY`).
        group_by: Vec<Expr>,
        /// The output columns (group expressions and aggregates).
        columns: Vec<Output>,
        /// What each output column computes, in the order of `columns` (empty, or of
        /// another length: unknown, and every column counts as [`Call::Other`]).
        calls: Vec<Call>,
    },
    /// `SELECT DISTINCT`: one row per distinct row of its input.
    Distinct {
        /// The input, whose output columns are the distinct ones.
        input: Box<Plan>,
    },
    /// `UNION ALL` of two or more branches.
    UnionAll {
        /// The branches, in written order.
        branches: Vec<Plan>,
    },
    /// `UNION`, `INTERSECT`, `EXCEPT` and their `ALL` forms (but `UNION ALL`).
    SetOp {
        /// Which operation.
        op: SetOpKind,
        /// `ALL`: copies are counted, not merged (`UNION ALL` is [`Plan::UnionAll`]).
        all: bool,
        /// The branches, in written order (two, as PostgreSQL nests them).
        branches: Vec<Plan>,
    },
}

impl Plan {
    /// An inner join of `inputs` on `condition`, a join among the inputs flattened into it:
    /// the tree of inner joins a query nests is one [`Plan::Join`] of its leaves in `FROM`
    /// order, their conditions `AND`ed, so that the join's identity does not depend on how
    /// the query nested them (spec/stream-tables.md §1).
    pub fn inner_join(inputs: Vec<Plan>, condition: Option<Expr>) -> Plan {
        let mut flat = Vec::with_capacity(inputs.len());
        let mut conditions = Vec::new();
        for input in inputs {
            match input {
                Plan::Join { inputs, condition } => {
                    flat.extend(inputs);
                    conditions.extend(condition);
                }
                other => flat.push(other),
            }
        }
        conditions.extend(condition);
        let condition = if conditions.len() > 1 {
            let sql: Vec<String> = conditions.iter().map(|c| format!("({})", c.sql)).collect();
            Some(Expr::new(&sql.join(" AND "), "boolean"))
        } else {
            conditions.pop()
        };
        Plan::Join {
            inputs: flat,
            condition,
        }
    }

    /// The output columns, as the operator above refers to them.
    pub fn outputs(&self) -> Vec<Output> {
        match self {
            Plan::Scan { columns, .. }
            | Plan::Function { columns, .. }
            | Plan::Project { columns, .. }
            | Plan::Window { columns, .. }
            | Plan::Aggregate { columns, .. } => columns.clone(),
            Plan::Subquery {
                alias,
                columns,
                input,
            } => columns
                .iter()
                .zip(input.outputs())
                .map(|(name, inner)| Output {
                    name: name.clone(),
                    expr: Expr::new(
                        &format!("{}.{}", quote_ident(alias), quote_ident(name)),
                        &inner.expr.sql_type,
                    ),
                })
                .collect(),
            Plan::Filter { input, .. }
            | Plan::SemiJoin { input, .. }
            | Plan::Distinct { input } => input.outputs(),
            Plan::Join { inputs, .. } => inputs.iter().flat_map(Plan::outputs).collect(),
            Plan::OuterJoin { left, right, .. } => {
                let mut out = left.outputs();
                out.extend(right.outputs());
                out
            }
            Plan::UnionAll { branches } | Plan::SetOp { branches, .. } => {
                branches.first().map(Plan::outputs).unwrap_or_default()
            }
        }
    }
}
