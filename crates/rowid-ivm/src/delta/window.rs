//! The window rule (spec/stream-tables.md §5.2): the partitions a change touches are
//! recomputed from the sources, and the stored rows of those partitions are their rows
//! before; both are applied as signed rows, so only the rows whose values changed are
//! written.
//!
//! A window's identity is `WINDOW_KEY(partition values, input row)` (§2): every stored row
//! of one partition has the same identity prefix (the header and the partition's fields,
//! wire-format.md §3 and §4), so a partition's stored rows are one range of the identity
//! index, found without decoding a stored identity.

use rowid_registry::sql::quote_ident;

use super::{Frame, NotDifferential, apply_signed, changed_in, no_change, term};
use crate::plan::Plan;
use crate::sql::{ROW_ID, level_where};

/// The bytes that end an identity whose last field is a NULL child: its tag (`40`), the
/// NULL state (`00`) and `TUPLE_END` (`FF`) (wire-format.md §3.1, §4, §6.1).
const NULL_CHILD_AND_END: usize = 3;

/// The DIFFERENTIAL (or IMMEDIATE) statement of a window level, or `None` for any other
/// operator.
pub(super) fn statement(plan: &Plan, frame: &Frame<'_>) -> Result<Option<String>, NotDifferential> {
    let Plan::Window { partition_by, .. } = plan else {
        return Ok(None);
    };
    let Frame {
        storage,
        changeable,
        head,
        go,
        row,
        ..
    } = *frame;
    let unrenderable = |e: crate::sql::Unrenderable| NotDifferential(e.0);
    let id = quote_ident(ROW_ID);
    let parts: Vec<String> = (1..=partition_by.len())
        .map(|i| format!("__pgt_p{i}"))
        .collect();
    // The partition of every row of every term of the change (its sign does not matter: a
    // partition a term reaches is touched); without PARTITION BY, one partition.
    let per_row: Vec<String> = if partition_by.is_empty() {
        vec!["1 AS __pgt_any".to_string()]
    } else {
        partition_by
            .iter()
            .zip(&parts)
            .map(|(e, p)| format!("{} AS {p}", e.sql))
            .collect()
    };
    let changed = changed_in(plan, changeable);
    let terms = (1..(1usize << changed.len()))
        .map(|set| term(plan, &changed, set, &[], false, &per_row))
        .collect::<Result<Vec<_>, _>>()?;
    if terms.is_empty() {
        return Ok(Some(no_change(head, row)));
    }
    let t_parts: Vec<String> = parts.iter().map(|p| format!("t.{p}")).collect();
    let selected = if parts.is_empty() {
        "t.__pgt_any".to_string()
    } else {
        t_parts.join(", ")
    };
    // Each touched partition's identity range: its prefix (the identity of the partition's
    // values and a NULL child, without the NULL child and TUPLE_END) up to that prefix and
    // `FF`, which no field tag reaches.
    let mut prefix_fields = t_parts.clone();
    prefix_fields.push("NULL::pgtrickle.row_id".to_string());
    let touched = format!(
        "__pgt_tp AS (SELECT DISTINCT {selected} FROM ({}) AS t WHERE {go}), \
         __pgt_tr AS (SELECT x.lo, x.lo OPERATOR(pg_catalog.||) pg_catalog.decode('ff', 'hex') AS hi \
           FROM (SELECT pg_catalog.substr(e.b, 1, pg_catalog.length(e.b) - {NULL_CHILD_AND_END}) AS lo \
             FROM (SELECT pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW({})) AS b FROM __pgt_tp AS t) AS e) AS x), ",
        terms.join(" UNION ALL "),
        prefix_fields.join(", "),
    );
    // The touched partitions' rows now: a partition without NULLs by equality (a semi-join
    // the server can drive by an index), one with a NULL by IS NOT DISTINCT FROM.
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    let weight = ["1 AS \"__pgt_w\"".to_string()];
    let values: Vec<&str> = partition_by.iter().map(|e| e.sql.as_str()).collect();
    let restrictions: Vec<Vec<String>> = if values.is_empty() {
        vec![vec!["EXISTS (SELECT FROM __pgt_tp)".to_string()]]
    } else {
        let any_null = |v: &[String]| {
            v.iter()
                .map(|x| format!("{x} IS NULL"))
                .collect::<Vec<_>>()
                .join(" OR ")
        };
        let own: Vec<String> = values.iter().map(|v| format!("({v})")).collect();
        let same: Vec<String> = values
            .iter()
            .zip(&t_parts)
            .map(|(v, t)| format!("{t} IS NOT DISTINCT FROM ({v})"))
            .collect();
        vec![
            vec![format!(
                "({}) IN (SELECT {} FROM __pgt_tp AS t)",
                own.join(", "),
                t_parts.join(", ")
            )],
            vec![
                format!("({})", any_null(&own)),
                format!(
                    "EXISTS (SELECT FROM __pgt_tp AS t WHERE ({}) AND {})",
                    any_null(&t_parts),
                    same.join(" AND ")
                ),
            ],
        ]
    };
    let mut delta = Vec::new();
    for more in &restrictions {
        delta.push(
            level_where(plan, &names, true, false, &|_| None, &weight, more)
                .map_err(unrenderable)?,
        );
    }
    // Their stored rows, each weighing -1.
    let stored: Vec<String> = names
        .iter()
        .map(|n| format!("s.{}", quote_ident(n)))
        .collect();
    delta.push(format!(
        "SELECT s.{id}, {}, -1 AS \"__pgt_w\" FROM {storage} AS s JOIN __pgt_tr AS r \
           ON s.{id} OPERATOR(pg_catalog.>=) r.lo AND s.{id} OPERATOR(pg_catalog.<) r.hi",
        stored.join(", ")
    ));
    Ok(Some(apply_signed(
        plan,
        frame,
        &format!("{head}{touched}"),
        &delta,
    )))
}
