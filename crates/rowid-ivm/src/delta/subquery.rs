//! Subqueries and CTEs in `FROM` (spec/stream-tables.md §5.2): the change of a subquery,
//! read by the level above it like a scan's images. A linear subquery's change is its own
//! rows' change; one that aggregates or deduplicates is differenced: its rows now less its
//! rows before the change, for the identities the change touches, the rows before computed
//! over its inputs as they were ([`before`]).

use rowid_registry::sql::quote_ident;

use super::{
    Changeable, NotDifferential, from_items, is_linear, item_key, linear_delta, recomputation,
};
use crate::identity::name;
use crate::plan::Plan;
use crate::sql::ROW_ID;

/// The rows of a `FROM` item named `alias` as they were before a change: the rows now
/// (`now`, a `FROM` item under that name) less the change (`images`, under that name, signed
/// in `__pgt_w`), as a `FROM` item under that name with the columns `columns`. Rows whose
/// identity (`id`, an expression in the item's scope) the change does not reach are taken as
/// they are; the others are counted per representation (`ROW(columns)::text`: `2.0` and
/// `2.00` stay apart), the rows now +1 each and the images negated, and each representation
/// with a positive count comes back that many times.
pub(super) fn before(alias: &str, now: &str, images: &str, id: &str, columns: &[String]) -> String {
    let a = quote_ident(alias);
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

/// [`before`] of a scan whose images over the columns `columns` (every column with an
/// image, by name) are `images`.
pub(super) fn scan_before(scan: &Plan, images: &str, columns: &[String]) -> String {
    let Plan::Scan {
        relation, alias, ..
    } = scan
    else {
        return String::new();
    };
    before(
        alias,
        &format!("{relation} AS {}", quote_ident(alias)),
        images,
        &crate::identity::identity_sql(&crate::identity::identity(scan)),
        columns,
    )
}

/// True when `plan` reads, at any depth, a subquery that aggregates or deduplicates: its
/// change (§5.2) is that subquery's rows now and before, which may spell equal values
/// differently where nothing changed (of `2.0` and `2.00`, `min` and `DISTINCT` give
/// whichever they meet first), so the level reading it is applied by identity, never by
/// representation.
pub(super) fn reads_differenced(plan: &Plan) -> bool {
    match plan {
        Plan::Scan { .. } => false,
        Plan::Subquery { input, .. } => !is_linear(input) || reads_differenced(input),
        Plan::Project { input, .. }
        | Plan::Filter { input, .. }
        | Plan::Aggregate { input, .. }
        | Plan::Distinct { input } => reads_differenced(input),
        Plan::Join { inputs, .. } => inputs.iter().any(reads_differenced),
        Plan::UnionAll { branches } | Plan::SetOp { branches, .. } => {
            branches.iter().any(reads_differenced)
        }
    }
}

/// Adds to `changeable`, inner ones first, every subquery in a `FROM` of `plan` that the
/// change reaches. A linear subquery's images are its own change's rows (identity, columns
/// by the names the outer query sees, weight). Any other's (aggregates, `DISTINCT`, set
/// operations but `UNION ALL`) are its rows now (+1) and its rows before the change (-1),
/// both for the identities the change touches only, the rows before computed by its own
/// query over its changed inputs as they were ([`before`]): a `WITH` part added to `parts`,
/// so that every term reading them reads them once.
pub(super) fn add_subqueries<'a>(
    plan: &'a Plan,
    changeable: &mut Vec<Changeable<'a>>,
    parts: &mut Vec<String>,
) -> Result<(), NotDifferential> {
    match plan {
        Plan::Scan { .. } => Ok(()),
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
            let images = if is_linear(input) {
                let delta = linear_delta(input, columns, changeable)?;
                if delta.is_empty() {
                    return Ok(());
                }
                format!("({}) AS {}", delta.join(" UNION ALL "), quote_ident(alias))
            } else {
                from_items(input)?;
                // Its rows before the change are computed by representation ([`before`]):
                // the rows of an input that aggregates or deduplicates have none for certain.
                if reads_differenced(input) {
                    return Err(NotDifferential(
                        "a subquery that aggregates or deduplicates the rows of another".into(),
                    ));
                }
                let unknown = || NotDifferential(format!("a {} in a subquery", name(input)));
                let (touched, now) =
                    recomputation(input, columns, changeable, &|_| None)?.ok_or_else(unknown)?;
                if touched.is_empty() {
                    return Ok(());
                }
                let old_of = |item: &Plan| -> Option<String> {
                    let (a, r) = item_key(item)?;
                    changeable
                        .iter()
                        .find(|c| c.alias == a && c.relation == r)
                        .map(|c| c.old.clone())
                };
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
                format!("(SELECT * FROM {part}) AS {}", quote_ident(alias))
            };
            let now = format!(
                "({}) AS {}",
                crate::sql::render(input, columns).map_err(|e| NotDifferential(e.0))?,
                quote_ident(alias)
            );
            let every: Vec<String> = std::iter::once(ROW_ID.to_string())
                .chain(columns.iter().cloned())
                .collect();
            changeable.push(Changeable {
                alias,
                relation,
                old: before(
                    alias,
                    &now,
                    &images,
                    &format!("{}.{id}", quote_ident(alias)),
                    &every,
                ),
                images,
            });
            Ok(())
        }
        Plan::Project { input, .. }
        | Plan::Filter { input, .. }
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
