//! The additive delta rule of an aggregate level (spec/stream-tables.md §5.5): a group's
//! stored row is updated with the change's counts and sums, never read from the sources again,
//! except where recomputation is the only exact answer (a `min` or `max` that lost a value, a
//! `numeric` sum that lost the last value of its largest scale, a `NaN` or an infinity).
//!
//! It applies to a `GROUP BY` level, or one without `GROUP BY`, with no `HAVING`, whose every
//! output column is a function of the group expressions or one of these calls:
//!
//! | call | hidden state per group | change applied |
//! |---|---|---|
//! | `count(*)`, `count(x)` | - | the count plus the change's signed count |
//! | `sum(x)`, `x` integer | `__pgt_nn_i` (non-NULL inputs) | plus the change's signed sum; NULL when `__pgt_nn_i` is 0 |
//! | `sum(x)`, `x` numeric | `__pgt_nn_i`, `__pgt_ms_i` (largest scale), `__pgt_msc_i` (inputs of that scale) | as for integers; recomputed when `__pgt_msc_i` would reach 0 with inputs left, or on a non-finite input or sum |
//! | `avg(x)`, `x` integer or numeric | the same, and `__pgt_sum_i` | `__pgt_sum_i / __pgt_nn_i` (the division `avg` itself makes) |
//! | `min`, `max`, `bool_and`, `bool_or` | - | `LEAST` / `GREATEST` of the stored value and the change's inserted ones; recomputed when the change deletes a non-NULL input |
//!
//! and `__pgt_count`, the group's rows (a group whose count reaches 0 is deleted; the row of an
//! aggregate without `GROUP BY` always stays). The hidden columns follow the query's columns
//! in the storage (`i` is the 1-based position of the column they serve).

use rowid_registry::sql::quote_ident;

use super::{Frame, NotDifferential, changed_in, group_identity_per_row, term, weighted_sets};
use crate::plan::{AggregateFunc, ArgClass, Call, Expr, Output, Plan};
use crate::sql::{ROW_ID, level_identity, level_where};

/// The column counting a group's rows.
pub const COUNT_COLUMN: &str = "__pgt_count";

/// How a column's value is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// A function of the group expressions: set when the group is created.
    Group,
    /// `count(*)`.
    CountRows,
    /// `count(x)`.
    CountValues,
    /// `sum(x)` over integers.
    IntSum,
    /// `sum(x)` over numeric.
    NumSum,
    /// `avg(x)` over integers.
    IntAvg,
    /// `avg(x)` over numeric.
    NumAvg,
    /// `min`, `bool_and` (`LEAST`) or `max`, `bool_or` (`GREATEST`).
    Extreme {
        /// `LEAST` or `GREATEST`.
        combine: &'static str,
        /// The aggregate that gives the change's extreme.
        agg: &'static str,
    },
}

impl Rule {
    fn of(call: &Call) -> Option<Rule> {
        let Call::Aggregate {
            func,
            arg,
            arg_class,
        } = call
        else {
            return matches!(call, Call::Group).then_some(Rule::Group);
        };
        Some(match (func, arg, arg_class) {
            (AggregateFunc::Count, None, _) => Rule::CountRows,
            (AggregateFunc::Count, Some(_), _) => Rule::CountValues,
            (_, None, _) => return None,
            (AggregateFunc::Sum, _, ArgClass::Integer) => Rule::IntSum,
            (AggregateFunc::Sum, _, ArgClass::Numeric) => Rule::NumSum,
            (AggregateFunc::Avg, _, ArgClass::Integer) => Rule::IntAvg,
            (AggregateFunc::Avg, _, ArgClass::Numeric) => Rule::NumAvg,
            (AggregateFunc::Sum | AggregateFunc::Avg, _, ArgClass::Other) => return None,
            (AggregateFunc::Min, ..) => Rule::Extreme {
                combine: "LEAST",
                agg: "min",
            },
            (AggregateFunc::Max, ..) => Rule::Extreme {
                combine: "GREATEST",
                agg: "max",
            },
            (AggregateFunc::BoolAnd, ..) => Rule::Extreme {
                combine: "LEAST",
                agg: "bool_and",
            },
            (AggregateFunc::BoolOr, ..) => Rule::Extreme {
                combine: "GREATEST",
                agg: "bool_or",
            },
        })
    }

    fn counts_values(self) -> bool {
        matches!(
            self,
            Rule::IntSum | Rule::NumSum | Rule::IntAvg | Rule::NumAvg
        )
    }

    fn keeps_sum(self) -> bool {
        matches!(self, Rule::IntAvg | Rule::NumAvg)
    }

    fn tracks_scale(self) -> bool {
        matches!(self, Rule::NumSum | Rule::NumAvg)
    }
}

/// An additive aggregate level: its input, group expressions, columns and their rules.
struct Additive<'a> {
    input: &'a Plan,
    group_by: &'a [Expr],
    columns: &'a [Output],
    rules: Vec<(Rule, Option<&'a Expr>)>,
}

fn additive(plan: &Plan) -> Option<Additive<'_>> {
    let Plan::Aggregate {
        input,
        group_by,
        columns,
        calls,
    } = plan
    else {
        return None;
    };
    // A change read from a subquery that aggregates or deduplicates pairs its rows now and
    // before, whose representations may differ where nothing changed (of `2.0` and `2.00`,
    // `min` gives whichever it meets first): adding it to stored sums would move their scale.
    if calls.len() != columns.len() || super::subquery::reads_differenced(input) {
        return None;
    }
    let mut rules = Vec::with_capacity(calls.len());
    for call in calls {
        let arg = match call {
            Call::Aggregate { arg, .. } => arg.as_ref(),
            _ => None,
        };
        rules.push((Rule::of(call)?, arg));
    }
    Some(Additive {
        input,
        group_by,
        columns,
        rules,
    })
}

/// True when `plan`'s change is applied by this rule (and its storage has hidden columns).
pub fn is_additive(plan: &Plan) -> bool {
    additive(plan).is_some()
}

/// The hidden column names of column `i` (1-based) under `rule`, in storage order.
fn hidden_names(i: usize, rule: Rule) -> Vec<String> {
    let mut out = Vec::new();
    if rule.counts_values() {
        out.push(format!("__pgt_nn_{i}"));
    }
    if rule.keeps_sum() {
        out.push(format!("__pgt_sum_{i}"));
    }
    if rule.tracks_scale() {
        out.push(format!("__pgt_ms_{i}"));
        out.push(format!("__pgt_msc_{i}"));
    }
    out
}

/// The plan whose rows a stream table stores: `plan` itself, or, for an additive aggregate,
/// `plan` with the hidden columns after its own ([`COUNT_COLUMN`] first).
pub fn storage_plan(plan: &Plan) -> Plan {
    let Some(a) = additive(plan) else {
        return plan.clone();
    };
    let mut columns = a.columns.to_vec();
    let mut calls = match plan {
        Plan::Aggregate { calls, .. } => calls.clone(),
        _ => Vec::new(),
    };
    let mut hide = |name: &str, sql: String, ty: &str| {
        columns.push(Output {
            name: name.to_string(),
            expr: Expr::new(&sql, ty),
        });
        calls.push(Call::Other);
    };
    hide(COUNT_COLUMN, "pg_catalog.count(*)".into(), "bigint");
    for (i, (rule, arg)) in a.rules.iter().enumerate() {
        let Some(arg) = arg else { continue };
        let x = &arg.sql;
        let scale = format!("pg_catalog.max(pg_catalog.scale({x}))");
        for name in hidden_names(i + 1, *rule) {
            let (sql, ty) = if name.starts_with("__pgt_nn_") {
                (format!("pg_catalog.count({x})"), "bigint")
            } else if name.starts_with("__pgt_sum_") {
                (
                    format!("CAST(pg_catalog.sum({x}) AS pg_catalog.numeric)"),
                    "numeric",
                )
            } else if name.starts_with("__pgt_msc_") {
                // The inputs of the largest scale: the positions of that scale among all.
                (
                    format!(
                        "CAST(CASE WHEN {scale} IS NULL THEN 0 ELSE pg_catalog.cardinality(\
                         pg_catalog.array_positions(pg_catalog.array_agg(pg_catalog.scale({x})), \
                         {scale})) END AS pg_catalog.int8)"
                    ),
                    "bigint",
                )
            } else {
                (scale.clone(), "integer")
            };
            hide(&name, sql, ty);
        }
    }
    Plan::Aggregate {
        input: Box::new(a.input.clone()),
        group_by: a.group_by.to_vec(),
        columns,
        calls,
    }
}

/// A `numeric` column `i`'s new largest scale: the stored one or the inserted inputs'.
fn scale_max(i: usize) -> String {
    format!("GREATEST(s.\"__pgt_ms_{i}\", a.mi{i})")
}

/// How many inputs of column `i` have its new largest scale: those of the change's largest
/// scale when it is above the stored one (deleted inputs never are), else the stored count
/// plus the change's inputs of the stored scale.
fn scale_count(i: usize) -> String {
    let ms = format!("s.\"__pgt_ms_{i}\"");
    format!(
        "(CASE WHEN {m} IS NULL THEN 0 \
           WHEN {ms} IS NULL OR a.mall{i} > {ms} THEN COALESCE(a.sall{i}, 0) \
           ELSE s.\"__pgt_msc_{i}\" + (CASE WHEN a.mall{i} = {ms} THEN COALESCE(a.sall{i}, 0) \
             ELSE 0 END) END)",
        m = scale_max(i)
    )
}

/// The statement applying the change of the additive aggregate `plan` (see the module) in
/// `frame`, or `None` when `plan` is not one.
pub(super) fn statement(plan: &Plan, frame: &Frame<'_>) -> Result<Option<String>, NotDifferential> {
    let Some(a) = additive(plan) else {
        return Ok(None);
    };
    let (storage, head, row) = (frame.storage, frame.head, frame.row);
    let id = quote_ident(ROW_ID);
    let scalar = a.group_by.is_empty();
    let gid = group_identity_per_row(plan)?;

    // The change's rows: the group expressions' values, the group columns' values, each
    // call's argument, weight. They are grouped by the group expressions (the equality the
    // query's GROUP BY uses, which the identity follows), and each group's identity is
    // encoded once from its values.
    let mut delta_cols = Vec::new();
    for (k, e) in a.group_by.iter().enumerate() {
        delta_cols.push(Output {
            name: format!("k{}", k + 1),
            expr: e.clone(),
        });
    }
    let keys: Vec<String> = (1..=a.group_by.len()).map(|k| format!("d.k{k}")).collect();
    let group_id = if scalar {
        level_identity(plan).map_err(|e| NotDifferential(e.0))?
    } else {
        format!(
            "pgtrickle.encode_row_id_v2('GROUP_KEY', ROW({}))",
            keys.join(", ")
        )
    };
    let partition = if scalar {
        String::new()
    } else {
        format!("PARTITION BY {}", keys.join(", "))
    };
    let grouping = if scalar {
        // One row for the one group, and none without a change.
        " HAVING pg_catalog.count(*) > 0".to_string()
    } else {
        format!(" GROUP BY {}", keys.join(", "))
    };
    let mut windows = Vec::new();
    for (i, ((rule, arg), out)) in a.rules.iter().zip(a.columns).enumerate() {
        if *rule == Rule::Group {
            delta_cols.push(Output {
                name: format!("g{}", i + 1),
                expr: out.expr.clone(),
            });
        }
        if let Some(arg) = arg {
            delta_cols.push(Output {
                name: format!("a{}", i + 1),
                expr: (*arg).clone(),
            });
        }
    }
    let names: Vec<String> = delta_cols.iter().map(|c| c.name.clone()).collect();
    let level = Plan::Project {
        input: Box::new(a.input.clone()),
        columns: delta_cols,
    };
    let changed = changed_in(&level, frame.changeable);
    let mut terms = Vec::new();
    for (set, weight) in weighted_sets(&changed) {
        terms.push(term(
            &level,
            &changed,
            set,
            &names,
            false,
            &[format!("CAST({weight} AS pg_catalog.int4) AS \"__pgt_w\"")],
        )?);
    }
    if terms.is_empty() {
        return Ok(Some(super::no_change(head, row)));
    }

    // Per group: the change's counts, sums, scales and extremes.
    let w = "d.\"__pgt_w\"";
    let mut agg = vec![
        format!("{group_id} AS {id}"),
        format!("pg_catalog.sum({w}) AS dn"),
    ];
    // Per group, after joining the stored row `s`: each column's new value `v<i>`, the
    // hidden columns' `h_<name>`, and what makes the group dirty.
    let mut values = Vec::new();
    let mut hidden = vec![(
        COUNT_COLUMN.to_string(),
        format!("COALESCE(s.{}, 0) + a.dn", quote_ident(COUNT_COLUMN)),
    )];
    let mut dirty = vec!["false".to_string()];
    for (i, ((rule, _), out)) in a.rules.iter().zip(a.columns).enumerate() {
        let i = i + 1;
        let col = format!("s.{}", quote_ident(&out.name));
        let x = format!("d.a{i}");
        let nn = format!("(COALESCE(s.\"__pgt_nn_{i}\", 0) + COALESCE(a.dnn{i}, 0))");
        if rule.counts_values() || *rule == Rule::CountValues {
            // `count(x)` counts the values that are not the null value: a composite value
            // with a NULL field is one (`IS NOT NULL` is false for it), as an array is.
            agg.push(format!(
                "pg_catalog.sum({w}) FILTER (WHERE pg_catalog.num_nonnulls({x}) = 1) AS dnn{i}"
            ));
        }
        if rule.counts_values() {
            agg.push(format!(
                "pg_catalog.sum(CAST({w} AS pg_catalog.numeric) * {x}) AS ds{i}"
            ));
            hidden.push((format!("__pgt_nn_{i}"), nn.clone()));
        }
        if rule.tracks_scale() {
            agg.push(format!(
                "COALESCE(pg_catalog.bool_or({x} IS NOT NULL AND pg_catalog.scale({x}) IS NULL), \
                 false) AS bad{i}"
            ));
            // The change's largest scale (a window over its group), how its inputs of that
            // scale weigh, and its inserted inputs' largest scale.
            windows.push(format!(
                "pg_catalog.max(pg_catalog.scale(d.a{i})) OVER ({partition}) AS mall{i}"
            ));
            agg.push(format!("pg_catalog.max(d.mall{i}) AS mall{i}"));
            agg.push(format!(
                "pg_catalog.sum({w}) FILTER (WHERE pg_catalog.scale({x}) = d.mall{i}) AS sall{i}"
            ));
            agg.push(format!(
                "pg_catalog.max(pg_catalog.scale({x})) FILTER (WHERE {w} > 0) AS mi{i}"
            ));
            let stored_sum = if rule.keeps_sum() {
                format!("s.\"__pgt_sum_{i}\"")
            } else {
                col.clone()
            };
            dirty.push(format!(
                "a.bad{i} OR (pg_catalog.scale({stored_sum}) IS NULL AND {stored_sum} IS NOT NULL) \
                 OR ({nn} > 0 AND {c} <= 0)",
                c = scale_count(i)
            ));
        }
        let sum = |stored: &str| format!("(COALESCE({stored}, 0) + COALESCE(a.ds{i}, 0))");
        let value = match rule {
            Rule::Group => format!("a.g{i}"),
            Rule::CountRows => format!("COALESCE({col}, 0) + a.dn"),
            Rule::CountValues => format!("COALESCE({col}, 0) + COALESCE(a.dnn{i}, 0)"),
            Rule::IntSum | Rule::NumSum => {
                format!("CASE WHEN {nn} = 0 THEN NULL ELSE {} END", sum(&col))
            }
            Rule::IntAvg | Rule::NumAvg => {
                let kept = sum(&format!("s.\"__pgt_sum_{i}\""));
                hidden.push((
                    format!("__pgt_sum_{i}"),
                    format!("CASE WHEN {nn} = 0 THEN NULL ELSE {kept} END"),
                ));
                format!(
                    "CASE WHEN {nn} = 0 THEN NULL ELSE {kept} / CAST({nn} AS pg_catalog.numeric) END"
                )
            }
            Rule::Extreme { combine, agg: f } => {
                agg.push(format!(
                    "pg_catalog.{f}({x}) FILTER (WHERE {w} > 0) AS x{i}"
                ));
                agg.push(format!(
                    "COALESCE(pg_catalog.bool_or({w} < 0 AND {x} IS NOT NULL), false) AS del{i}"
                ));
                dirty.push(format!("a.del{i}"));
                format!("{combine}({col}, a.x{i})")
            }
        };
        if *rule == Rule::Group {
            agg.push(format!(
                "(pg_catalog.array_agg(d.g{i}) FILTER (WHERE {w} > 0))[1] AS g{i}"
            ));
        }
        if rule.tracks_scale() {
            hidden.push((
                format!("__pgt_ms_{i}"),
                format!("CASE WHEN {nn} = 0 THEN NULL ELSE {} END", scale_max(i)),
            ));
            hidden.push((
                format!("__pgt_msc_{i}"),
                format!("CASE WHEN {nn} = 0 THEN 0 ELSE {} END", scale_count(i)),
            ));
        }
        values.push(value);
    }
    // Storage order of the hidden columns (the count, then per column).
    let mut order = vec![COUNT_COLUMN.to_string()];
    for (i, (rule, _)) in a.rules.iter().enumerate() {
        order.extend(hidden_names(i + 1, *rule));
    }
    let hidden_value = |name: &str| -> String {
        hidden
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "NULL".into())
    };

    let m = |s: &str, t: &str| rowid_registry::sql::match_predicate(frame.class, s, t);
    let mut st = vec![
        format!("a.{id}"),
        format!("(s.{id} IS NOT NULL) AS __pgt_had"),
    ];
    for (i, v) in values.iter().enumerate() {
        st.push(format!("{v} AS v{}", i + 1));
    }
    for (k, name) in order.iter().enumerate() {
        st.push(format!("{} AS h{}", hidden_value(name), k + 1));
    }
    st.push(format!("({}) AS __pgt_dirty", dirty.join(") OR (")));
    let count_h = "t.h1";
    let keep = if scalar {
        "true".to_string()
    } else {
        format!("{count_h} > 0")
    };
    let mut set = Vec::new();
    for (i, ((rule, _), out)) in a.rules.iter().zip(a.columns).enumerate() {
        if *rule != Rule::Group {
            set.push(format!("{} = t.v{}", quote_ident(&out.name), i + 1));
        }
    }
    for (k, name) in order.iter().enumerate() {
        set.push(format!("{} = t.h{}", quote_ident(name), k + 1));
    }
    let new_cols: Vec<String> = (1..=values.len())
        .map(|i| format!("t.v{i}"))
        .chain((1..=order.len()).map(|k| format!("t.h{k}")))
        .collect();
    let stored = storage_plan(plan);
    let stored_names: Vec<String> = stored.outputs().into_iter().map(|o| o.name).collect();
    let fresh = level_where(
        &stored,
        &stored_names,
        true,
        false,
        &|_| None,
        &[],
        &[format!(
            "{gid} IN (SELECT t.{id} FROM __pgt_st AS t WHERE t.__pgt_dirty)"
        )],
    )
    .map_err(|e| NotDifferential(e.0))?;
    Ok(Some(format!(
        "{head}__pgt_delta AS (SELECT d.*{windows} FROM ({terms}) AS d WHERE {go}), \
         __pgt_agg AS (SELECT {agg} FROM __pgt_delta AS d{grouping}), \
         __pgt_st AS (SELECT {st} FROM __pgt_agg AS a LEFT JOIN {storage} AS s ON {ms}), \
         __pgt_del AS (DELETE FROM {storage} AS s USING __pgt_st AS t \
           WHERE t.__pgt_had AND (t.__pgt_dirty OR NOT ({keep})) AND {mt} RETURNING 1), \
         __pgt_upd AS (UPDATE {storage} AS s SET {set} FROM __pgt_st AS t \
           WHERE t.__pgt_had AND NOT t.__pgt_dirty AND {keep} AND {mt} RETURNING 1), \
         __pgt_add AS (INSERT INTO {storage} SELECT t.{id}, {new_cols} FROM __pgt_st AS t \
           WHERE NOT t.__pgt_had AND NOT t.__pgt_dirty AND {keep} RETURNING 1), \
         __pgt_fresh AS (INSERT INTO {storage} SELECT f.* FROM ({fresh}) AS f \
           WHERE f.{id} IN (SELECT t.{id} FROM __pgt_st AS t WHERE t.__pgt_dirty) RETURNING 1), \
         __pgt_gone AS (SELECT 1 FROM __pgt_del UNION ALL SELECT 1 FROM __pgt_upd), \
         __pgt_new AS (SELECT 1 FROM __pgt_add UNION ALL SELECT 1 FROM __pgt_fresh) \
         {row}",
        go = frame.go,
        terms = terms.join(" UNION ALL "),
        windows = windows.iter().map(|w| format!(", {w}")).collect::<String>(),
        agg = agg.join(", "),
        st = st.join(", "),
        ms = m("s", "a"),
        mt = m("s", "t"),
        set = set.join(", "),
        new_cols = new_cols.join(", "),
    )))
}
