//! The SQL that computes a stream table's rows with their identities (spec/stream-tables.md
//! §4): the query rebuilt from its operator tree in scoped blocks, every row's
//! `__pgt_row_id` first.
//!
//! A `SELECT` level of the query (its `FROM` items, `WHERE`, `GROUP BY`, `HAVING` and target
//! list) stays one `SELECT`, its expressions the server's own deparsed text under the names
//! the server gave its `FROM` items; the identity of its rows is computed in that same scope
//! ([`level_identity`]). Every boundary the identity must cross becomes a block that exposes
//! the rows' identity as the column `__pgt_row_id`: a subquery or CTE in `FROM`, the input of
//! `DISTINCT`, each branch of a set operation. A block's identity enters the one above it as
//! a child identity (or passes through) by that column: the bytes are the same as the
//! identity derived in one expression (§3), because a child field holds the child's bytes.

use rowid_registry::sql::quote_ident;

use crate::identity::{SCALAR_AGGREGATE_SINGLETON, identity, identity_sql};
use crate::plan::{Expr, Output, Plan};

/// The name of the identity column, first in every stream table and every block.
pub const ROW_ID: &str = "__pgt_row_id";

/// A tree this module cannot render: only the extension's reader builds trees, so this is a
/// bug there, reported instead of rendering something else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrenderable(pub String);

impl std::fmt::Display for Unrenderable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the operator tree cannot be rendered: {}", self.0)
    }
}

impl std::error::Error for Unrenderable {}

/// `SELECT "__pgt_row_id", <each output column by its name>`: every row of `plan`'s result
/// with its identity; what a FULL refresh stores.
pub fn full_query(plan: &Plan) -> Result<String, Unrenderable> {
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    render(plan, &names)
}

/// `plan`'s rows as `__pgt_row_id` and its output columns named `names`, in order.
fn render(plan: &Plan, names: &[String]) -> Result<String, Unrenderable> {
    render_with(plan, names, &|_| None)
}

/// [`render`] with a `FROM` item of its levels replaced where `replace` gives its SQL (as in
/// [`level_where`]; a subquery's own items are not offered to it).
pub(crate) fn render_with(
    plan: &Plan,
    names: &[String],
    replace: &dyn Fn(&Plan) -> Option<String>,
) -> Result<String, Unrenderable> {
    match plan {
        Plan::Distinct { input } => {
            let inner = level_where(input, &positional(input), false, true, replace, &[], &[])?;
            let cols = refs("d", input);
            Ok(format!(
                "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW({})) AS {}, {} FROM ({inner}) AS d",
                cols.join(", "),
                quote_ident(ROW_ID),
                named(&cols, names),
            ))
        }
        Plan::UnionAll { branches } => {
            let mut parts = Vec::with_capacity(branches.len());
            for (n, branch) in branches.iter().enumerate() {
                let inner = render_with(branch, &positional(branch), replace)?;
                let cols = refs("b", branch);
                parts.push(format!(
                    "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW({}::pg_catalog.int4, \
                     b.{}::pgtrickle.row_id)) AS {}, {} FROM ({inner}) AS b",
                    n + 1,
                    quote_ident(ROW_ID),
                    quote_ident(ROW_ID),
                    named(&cols, names),
                ));
            }
            Ok(parts.join(" UNION ALL "))
        }
        Plan::SetOp { op, all, branches } => {
            let mut parts = Vec::with_capacity(branches.len());
            for branch in branches {
                let inner = render_with(branch, &positional(branch), replace)?;
                parts.push(format!(
                    "(SELECT {} FROM ({inner}) AS b)",
                    refs("b", branch).join(", ")
                ));
            }
            let glue = format!(" {}{} ", op.keyword(), if *all { " ALL" } else { "" });
            let first = branches
                .first()
                .ok_or_else(|| Unrenderable("a set operation without branches".into()))?;
            let cols = refs("s", first);
            Ok(format!(
                "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW({})) AS {}, {} FROM ({}) AS s",
                cols.join(", "),
                quote_ident(ROW_ID),
                named(&cols, names),
                parts.join(&glue),
            ))
        }
        _ => level_where(plan, names, true, false, replace, &[], &[]),
    }
}

/// `c1`, `c2`, ...: the names a block's columns get inside the statement (output names may
/// repeat or collide with `__pgt_row_id`).
fn positional(plan: &Plan) -> Vec<String> {
    (1..=plan.outputs().len())
        .map(|i| format!("c{i}"))
        .collect()
}

/// `alias.c1`, `alias.c2`, ...: the columns of a block rendered with [`positional`] names.
fn refs(alias: &str, plan: &Plan) -> Vec<String> {
    positional(plan)
        .iter()
        .map(|c| format!("{alias}.{c}"))
        .collect()
}

/// `col AS "name"`, ...
fn named(cols: &[String], names: &[String]) -> String {
    cols.iter()
        .zip(names)
        .map(|(c, n)| format!("{c} AS {}", quote_ident(n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One `SELECT` level of the query: `[Project | [Filter (HAVING)] Aggregate] Filter* from`
/// where `from` is a scan, a subquery or an inner join of them.
struct Level<'a> {
    targets: &'a [Output],
    having: Option<&'a Expr>,
    group_by: Option<&'a [Expr]>,
    predicates: Vec<&'a Expr>,
    from: Vec<&'a Plan>,
}

fn split(plan: &Plan) -> Result<Level<'_>, Unrenderable> {
    let mut p = plan;
    let mut targets = None;
    if let Plan::Project { input, columns } | Plan::Window { input, columns, .. } = p {
        targets = Some(columns.as_slice());
        p = input;
    }
    let mut having = None;
    if let Plan::Filter { input, predicate } = p
        && matches!(**input, Plan::Aggregate { .. })
    {
        having = Some(predicate);
        p = input;
    }
    let mut group_by = None;
    if let Plan::Aggregate {
        input,
        group_by: g,
        columns,
        ..
    } = p
    {
        targets = targets.or(Some(columns.as_slice()));
        group_by = Some(g.as_slice());
        p = input;
    }
    let targets = targets.ok_or_else(|| {
        Unrenderable(format!(
            "a {} where a select list was expected",
            crate::identity::name(plan)
        ))
    })?;
    let mut predicates = Vec::new();
    // `WHERE`: a semi-join's predicate is a `WHERE` like any other, its subqueries in it.
    while let Plan::Filter { input, predicate }
    | Plan::SemiJoin {
        input, predicate, ..
    } = p
    {
        predicates.push(predicate);
        p = input;
    }
    let from = match p {
        Plan::Join { inputs, condition } => {
            predicates.extend(condition.iter());
            inputs.iter().collect()
        }
        Plan::Scan { .. }
        | Plan::Subquery { .. }
        | Plan::Function { .. }
        | Plan::OuterJoin { .. } => vec![p],
        other => {
            return Err(Unrenderable(format!(
                "a {} in FROM",
                crate::identity::name(other)
            )));
        }
    };
    Ok(Level {
        targets,
        having,
        group_by,
        predicates,
        from,
    })
}

/// A `SELECT` level rendered: with the identity first (`with_id`), or its values only
/// (for `DISTINCT`, `distinct`); a `FROM` item of it replaced where `replace` gives its SQL
/// (a delta relation under the item's name, not offered a subquery's own items), `extra`
/// select-list items after the columns, and `more` predicates `AND`ed to its `WHERE`.
pub(crate) fn level_where(
    plan: &Plan,
    names: &[String],
    with_id: bool,
    distinct: bool,
    replace: &dyn Fn(&Plan) -> Option<String>,
    extra: &[String],
    more: &[String],
) -> Result<String, Unrenderable> {
    let l = split(plan)?;
    let mut select: Vec<String> = Vec::with_capacity(l.targets.len() + 1);
    if with_id {
        select.push(format!(
            "{} AS {}",
            level_identity(plan)?,
            quote_ident(ROW_ID)
        ));
    }
    for (t, n) in l.targets.iter().zip(names) {
        select.push(format!("{} AS {}", t.expr.sql, quote_ident(n)));
    }
    select.extend(extra.iter().cloned());
    let mut from = Vec::with_capacity(l.from.len());
    for item in &l.from {
        from.push(match replace(item) {
            Some(sql) => sql,
            None => from_item(item)?,
        });
    }
    let mut sql = format!(
        "SELECT {}{} FROM {}",
        if distinct { "DISTINCT " } else { "" },
        select.join(", "),
        from.join(", ")
    );
    if !l.predicates.is_empty() || !more.is_empty() {
        let p: Vec<String> = l
            .predicates
            .iter()
            .map(|e| format!("({})", e.sql))
            .chain(more.iter().map(|m| format!("({m})")))
            .collect();
        sql.push_str(&format!(" WHERE {}", p.join(" AND ")));
    }
    if let Some(g) = l.group_by.filter(|g| !g.is_empty()) {
        let g: Vec<&str> = g.iter().map(|e| e.sql.as_str()).collect();
        sql.push_str(&format!(" GROUP BY {}", g.join(", ")));
    }
    if let Some(h) = l.having {
        sql.push_str(&format!(" HAVING {}", h.sql));
    }
    Ok(sql)
}

/// One `FROM` item: a scan under its name, a subquery's block, or an outer join of items
/// (an inner join inside one as `JOIN`s, its condition on the last).
fn from_item(item: &Plan) -> Result<String, Unrenderable> {
    match item {
        Plan::Scan {
            relation, alias, ..
        } => Ok(format!("{relation} AS {}", quote_ident(alias))),
        Plan::Subquery {
            alias,
            columns,
            input,
        } => Ok(format!(
            "({}) AS {}",
            render(input, columns)?,
            quote_ident(alias)
        )),
        // Implicitly LATERAL: its arguments may read the items before it.
        Plan::Function {
            alias,
            call,
            ordinality,
            columns,
        } => {
            let names: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
            Ok(format!(
                "{}{} AS {}({})",
                call.sql,
                if *ordinality { " WITH ORDINALITY" } else { "" },
                quote_ident(alias),
                names.join(", ")
            ))
        }
        Plan::Join { inputs, condition } => {
            let items = inputs
                .iter()
                .map(from_item)
                .collect::<Result<Vec<_>, _>>()?;
            let (last, rest) = items
                .split_last()
                .ok_or_else(|| Unrenderable("a join without inputs".into()))?;
            Ok(match condition {
                Some(c) => format!("({} JOIN {last} ON ({}))", rest.join(" CROSS JOIN "), c.sql),
                None => format!("({} CROSS JOIN {last})", rest.join(" CROSS JOIN ")),
            })
        }
        Plan::OuterJoin {
            kind,
            left,
            right,
            condition,
        } => Ok(format!(
            "({} {} {} ON ({}))",
            from_item(left)?,
            kind.keyword(),
            from_item(right)?,
            condition.sql
        )),
        other => Err(Unrenderable(format!(
            "a {} in FROM",
            crate::identity::name(other)
        ))),
    }
}

/// The identity of a level's rows, as an expression in the level's own scope: a scan's key
/// columns, a subquery's `__pgt_row_id` column, a join's children framed, a group's
/// expressions.
pub fn level_identity(plan: &Plan) -> Result<String, Unrenderable> {
    match plan {
        Plan::Scan { .. } | Plan::Function { .. } => Ok(identity_sql(&identity(plan))),
        Plan::Subquery { alias, .. } => {
            Ok(format!("{}.{}", quote_ident(alias), quote_ident(ROW_ID)))
        }
        Plan::Filter { input, .. } | Plan::SemiJoin { input, .. } | Plan::Project { input, .. } => {
            level_identity(input)
        }
        Plan::Join { inputs, .. } => {
            let mut children = Vec::with_capacity(inputs.len());
            for i in inputs {
                children.push(format!("({})::pgtrickle.row_id", level_identity(i)?));
            }
            Ok(format!(
                "pgtrickle.encode_row_id_v2('JOIN_KEY', ROW({}))",
                children.join(", ")
            ))
        }
        Plan::Window {
            input,
            partition_by,
            ..
        } => {
            let mut fields: Vec<String> = partition_by.iter().map(|e| e.sql.clone()).collect();
            fields.push(format!("({})::pgtrickle.row_id", level_identity(input)?));
            Ok(format!(
                "pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW({}))",
                fields.join(", ")
            ))
        }
        Plan::OuterJoin {
            kind, left, right, ..
        } => {
            // The side a row has no match on: a NULL child, not the identity of its NULLs.
            // The CASE is cast as a whole: PostgreSQL resolves a CASE of a domain and NULL
            // to the base type, and a `bytea` field is not a child (tag `0C`, not `40`).
            let child = |side: &Plan, nullable: bool| -> Result<String, Unrenderable> {
                let id = level_identity(side)?;
                Ok(if nullable {
                    format!(
                        "(CASE WHEN {} THEN {id} END)::pgtrickle.row_id",
                        crate::identity::presence(side).sql
                    )
                } else {
                    format!("({id})::pgtrickle.row_id")
                })
            };
            Ok(format!(
                "pgtrickle.encode_row_id_v2('JOIN_KEY', ROW({}, {}))",
                child(left, kind.left_nullable())?,
                child(right, kind.right_nullable())?
            ))
        }
        Plan::Aggregate { group_by, .. } if group_by.is_empty() => Ok(format!(
            "pgtrickle.encode_row_id_v2('SYNTHETIC', ROW('{SCALAR_AGGREGATE_SINGLETON}'::pg_catalog.text))"
        )),
        Plan::Aggregate { .. } => Ok(identity_sql(&identity(plan))),
        other => Err(Unrenderable(format!(
            "a {} inside a select level",
            crate::identity::name(other)
        ))),
    }
}
