//! The window rule (spec/stream-tables.md §5.2): the partitions a change touches are
//! recomputed from the sources, and the stored rows of those partitions are their rows
//! before; both are applied as signed rows, so only the rows whose values changed are
//! written.
//!
//! A window's identity is `WINDOW_KEY(partition values, input row)` (§2), so a partition's
//! stored rows are one range of the identity index (`ranges`), found without decoding a
//! stored identity.

use super::{Frame, NotDifferential, apply_signed, changed_in, no_change, term};
use crate::plan::Plan;
use crate::sql::level_where;

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
    // `__pgt_t`, not a name a query's own FROM item may have (§6.3): the restriction below
    // evaluates the query's partition expressions inside its subquery.
    let t_parts: Vec<String> = parts.iter().map(|p| format!("__pgt_t.{p}")).collect();
    let selected = if parts.is_empty() {
        "__pgt_t.__pgt_any".to_string()
    } else {
        t_parts.join(", ")
    };
    // Each touched partition's identity range: its prefix (the identity of the partition's
    // values and a NULL child, without the NULL child and TUPLE_END) up to that prefix and
    // `FF`, which no field tag reaches.
    let touched = format!(
        "__pgt_tp AS (SELECT DISTINCT {selected} FROM ({}) AS __pgt_t WHERE {go}), {}",
        terms.join(" UNION ALL "),
        super::ranges::ranges("__pgt_tp", "WINDOW_KEY", &t_parts),
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
                "({}) IN (SELECT {} FROM __pgt_tp AS __pgt_t)",
                own.join(", "),
                t_parts.join(", ")
            )],
            vec![
                format!("({})", any_null(&own)),
                format!(
                    "EXISTS (SELECT FROM __pgt_tp AS __pgt_t WHERE ({}) AND {})",
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
    delta.push(super::ranges::stored_in_ranges(storage, &names));
    Ok(Some(apply_signed(
        plan,
        frame,
        &format!("{head}{touched}"),
        &delta,
    )))
}
