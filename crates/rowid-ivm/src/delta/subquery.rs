//! Subqueries and CTEs in `FROM` (spec/stream-tables.md §5.2): the change of a subquery,
//! read by the level above it like a scan's images. A linear subquery's change is its own
//! rows' change; one that aggregates or deduplicates is differenced: its rows now less its
//! rows before the change, for the identities the change touches, the rows before computed
//! by its query over its inputs as they were. What an input was: a scan's rows now less its
//! images ([`scan_before`]); a linear subquery's query over its own inputs as they were; a
//! differenced subquery's rows now but those of the identities it recomputed, and its
//! negative images (its whole rows before for exactly those identities).

use rowid_registry::sql::quote_ident;

use super::{
    Changeable, NotDifferential, from_items, is_linear, item_key, linear_delta, recomputation,
};
use crate::identity::name;
use crate::plan::Plan;
use crate::sql::{ROW_ID, render_with};

/// The rows of `scan` as they were before a change whose images over the columns `columns`
/// (every column with an image, by name) are `images` (under the scan's name, signed in
/// `__pgt_w`): a `FROM` item under the scan's name. Rows whose identity no image reaches are
/// taken as they are now; the others are counted per representation (`ROW(columns)::text`:
/// `2.0` and `2.00` stay apart; a scan's values are stored, so its representations are
/// certain), the rows now +1 each and the images negated, and each representation with a
/// positive count comes back that many times.
pub(super) fn scan_before(scan: &Plan, images: &str, columns: &[String]) -> String {
    let Plan::Scan {
        relation, alias, ..
    } = scan
    else {
        return String::new();
    };
    let a = quote_ident(alias);
    let now = format!("{relation} AS {a}");
    let id = crate::identity::identity_sql(&crate::identity::identity(scan));
    let of = |t: &str| -> String {
        columns
            .iter()
            .map(|c| format!("{t}.{}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (ca, cv) = (of(&a), of("v"));
    let reached = format!("{id} IN (SELECT {id} FROM {images})");
    format!(
        "(SELECT {ca} FROM {now} WHERE NOT ({reached}) \
         UNION ALL \
         SELECT {cv} FROM (SELECT DISTINCT ON (u.__pgt_rep) u.*, \
             pg_catalog.sum(u.\"__pgt_w\") OVER (PARTITION BY u.__pgt_rep) AS __pgt_n \
           FROM (SELECT {ca}, ROW({ca})::pg_catalog.text AS __pgt_rep, 1 AS \"__pgt_w\" \
               FROM {now} WHERE {reached} \
             UNION ALL SELECT {ca}, ROW({ca})::pg_catalog.text, -{a}.\"__pgt_w\" FROM {images}) AS u) \
           AS v, pg_catalog.generate_series(1, v.__pgt_n) WHERE v.__pgt_n > 0) AS {a}"
    )
}

/// True when `plan` reads, at any depth, a subquery that aggregates or deduplicates: its
/// change (§5.2) is that subquery's rows now and before, which may spell equal values
/// differently where nothing changed (of `2.0` and `2.00`, `min` and `DISTINCT` give
/// whichever they meet first), so the level reading it is applied by identity, never by
/// representation.
pub(super) fn reads_differenced(plan: &Plan) -> bool {
    match plan {
        Plan::Scan { .. } | Plan::Function { .. } => false,
        Plan::Subquery { input, .. } => !is_linear(input) || reads_differenced(input),
        Plan::Project { input, .. }
        | Plan::Window { input, .. }
        | Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Aggregate { input, .. }
        | Plan::Distinct { input } => reads_differenced(input),
        Plan::Join { inputs, .. } => inputs.iter().any(reads_differenced),
        Plan::OuterJoin { left, right, .. } => reads_differenced(left) || reads_differenced(right),
        Plan::UnionAll { branches } | Plan::SetOp { branches, .. } => {
            branches.iter().any(reads_differenced)
        }
    }
}

/// Adds to `changeable`, inner ones first, every subquery in a `FROM` of `plan` that the
/// change reaches, with its images and its rows before the change (see the module). A
/// differenced subquery's images are a `WITH` part added to `parts`, so that every term
/// reading them reads them once.
pub(super) fn add_subqueries<'a>(
    plan: &'a Plan,
    changeable: &mut Vec<Changeable<'a>>,
    parts: &mut Vec<String>,
) -> Result<(), NotDifferential> {
    match plan {
        Plan::Scan { .. } | Plan::Function { .. } => Ok(()),
        Plan::OuterJoin { left, right, .. } => {
            add_subqueries(left, changeable, parts)?;
            add_subqueries(right, changeable, parts)
        }
        Plan::Subquery {
            alias,
            columns,
            input,
        } => {
            add_subqueries(input, changeable, parts)?;
            let Some((_, relation)) = item_key(plan) else {
                return Ok(());
            };
            if changeable.iter().any(|c| c.relation == relation) {
                return Ok(());
            }
            let id = quote_ident(ROW_ID);
            let a = quote_ident(alias);
            let old_of = |item: &Plan| -> Option<String> {
                let (a, r) = item_key(item)?;
                changeable
                    .iter()
                    .find(|c| c.alias == a && c.relation == r)
                    .map(|c| c.old.clone())
            };
            let unrenderable = |e: crate::sql::Unrenderable| NotDifferential(e.0);
            let (images, old) = if is_linear(input) {
                let delta = linear_delta(input, columns, changeable)?;
                if delta.is_empty() {
                    return Ok(());
                }
                // Its rows before: its query over its inputs as they were.
                let old = format!(
                    "({}) AS {a}",
                    render_with(input, columns, &old_of).map_err(unrenderable)?
                );
                (format!("({}) AS {a}", delta.join(" UNION ALL ")), old)
            } else {
                from_items(input)?;
                let unknown = || NotDifferential(format!("a {} in a subquery", name(input)));
                let (touched, now) =
                    recomputation(input, columns, changeable, &|_| None)?.ok_or_else(unknown)?;
                if touched.is_empty() {
                    return Ok(());
                }
                let (_, was) =
                    recomputation(input, columns, changeable, &old_of)?.ok_or_else(unknown)?;
                let part = format!("__pgt_sub{}", parts.len());
                let only = |t: &str| format!("{t}.{id} IN (SELECT a.{id} FROM __pgt_touched AS a)");
                parts.push(format!(
                    "{part} AS MATERIALIZED (WITH __pgt_touched AS (SELECT DISTINCT t.{id} \
                     FROM ({}) AS t) \
                     SELECT f.*, 1 AS \"__pgt_w\" FROM ({now}) AS f WHERE {} \
                     UNION ALL SELECT o.*, -1 FROM ({was}) AS o WHERE {})",
                    touched.join(" UNION ALL "),
                    only("f"),
                    only("o"),
                ));
                // Its rows before: its rows now but those of the identities it recomputed,
                // and its rows before of those (every one of them is in its images).
                let every: Vec<String> = std::iter::once(ROW_ID)
                    .chain(columns.iter().map(String::as_str))
                    .map(|c| format!("{a}.{}", quote_ident(c)))
                    .collect();
                let every = every.join(", ");
                let old = format!(
                    "(SELECT {every} FROM ({}) AS {a} \
                       WHERE NOT ({a}.{id} IN (SELECT p.{id} FROM {part} AS p)) \
                     UNION ALL SELECT {every} FROM {part} AS {a} WHERE {a}.\"__pgt_w\" < 0) AS {a}",
                    render_with(input, columns, &|_| None).map_err(unrenderable)?,
                );
                (format!("(SELECT * FROM {part}) AS {a}"), old)
            };
            changeable.push(Changeable {
                alias,
                relation,
                images,
                old,
            });
            Ok(())
        }
        Plan::Project { input, .. }
        | Plan::Window { input, .. }
        | Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Aggregate { input, .. }
        | Plan::Distinct { input } => add_subqueries(input, changeable, parts),
        Plan::Join { inputs, .. } => inputs
            .iter()
            .try_for_each(|i| add_subqueries(i, changeable, parts)),
        Plan::UnionAll { branches } | Plan::SetOp { branches, .. } => branches
            .iter()
            .try_for_each(|b| add_subqueries(b, changeable, parts)),
    }
}
