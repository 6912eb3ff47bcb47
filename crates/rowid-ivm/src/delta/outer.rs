//! The outer join rule (spec/stream-tables.md §5.2): a level over one outer join of two
//! scans is recomputed for the rows the change touches, and those rows' stored copies are
//! their rows before; both are applied as signed rows, so only the rows whose values changed
//! are written.
//!
//! A row of `A ⟕ B`, `A ⟖ B` or `A ⟗ B` is identified by `JOIN_KEY(left, right)`, the side
//! without a match a NULL child (§2). With `TA` the identities of `A`'s images and of `A`'s
//! rows now that meet an image of `B` under the join condition (and `TB` the same for `B`):
//!
//! - every row whose left side is in `TA` is recomputed (a matched row, or a left row
//!   without a match); its stored copies are one range of the identity order, the identity
//!   of `(TA, NULL)` less its NULL child and `TUPLE_END`;
//! - for `RIGHT` and `FULL`, every row without a left side whose right side is in `TB` is
//!   recomputed; its stored identity is exactly `JOIN_KEY(NULL, TB)`.
//!
//! No other row changes: a row whose sides are both untouched pairs rows that did not change
//! and met no changed row, so it is what it was, and a row without a match kept none and
//! gained none (a row that matched before and not now, or the reverse, met an image of the
//! other side, and is touched).

use rowid_registry::sql::quote_ident;

use super::{Changeable, Frame, NotDifferential, apply_signed, changed_in, no_change};
use crate::identity::presence;
use crate::plan::{OuterKind, Plan};
use crate::sql::{ROW_ID, level_identity, level_where};

/// The outer join a level reads as its only `FROM` item, both sides scans.
fn outer_join(level: &Plan) -> Option<(OuterKind, &Plan, &Plan, &str)> {
    match level {
        Plan::Project { input, .. } | Plan::Filter { input, .. } => outer_join(input),
        Plan::OuterJoin {
            kind,
            left,
            right,
            condition,
        } if matches!(**left, Plan::Scan { .. }) && matches!(**right, Plan::Scan { .. }) => {
            Some((*kind, left, right, condition.sql.as_str()))
        }
        _ => None,
    }
}

/// Whether `plan` is a level this rule applies to: `Project` and `Filter` over one outer
/// join of two scans. Any other tree with an outer join has no rule.
pub(super) fn applies(plan: &Plan) -> bool {
    outer_join(plan).is_some()
}

/// A scan as it is now, as a `FROM` item under its name.
fn now(scan: &Plan) -> String {
    match scan {
        Plan::Scan {
            relation, alias, ..
        } => format!("{relation} AS {}", quote_ident(alias)),
        _ => String::new(),
    }
}

/// The identities of `side`'s rows the change touches: those of its images, and those of its
/// rows now that meet an image of `other` under `condition`.
fn touched(
    side: &Plan,
    other: &Plan,
    condition: &str,
    changed: &[&Changeable<'_>],
) -> Result<Vec<String>, NotDifferential> {
    let id = level_identity(side).map_err(|e| NotDifferential(e.0))?;
    let images = |p: &Plan| -> Option<String> {
        let Plan::Scan {
            alias, relation, ..
        } = p
        else {
            return None;
        };
        changed
            .iter()
            .find(|c| c.alias == alias.as_str() && c.relation == *relation)
            .map(|c| c.images.clone())
    };
    let mut out = Vec::new();
    if let Some(own) = images(side) {
        out.push(format!("SELECT {id} AS {} FROM {own}", quote_ident(ROW_ID)));
    }
    if let Some(theirs) = images(other) {
        out.push(format!(
            "SELECT {id} AS {} FROM {}, {theirs} WHERE ({condition})",
            quote_ident(ROW_ID),
            now(side)
        ));
    }
    Ok(out)
}

/// The DIFFERENTIAL (or IMMEDIATE) statement of a level over an outer join, or `None` for any
/// other tree.
pub(super) fn statement(plan: &Plan, frame: &Frame<'_>) -> Result<Option<String>, NotDifferential> {
    let Some((kind, left, right, condition)) = outer_join(plan) else {
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
    let changed = changed_in(plan, changeable);
    let by_right = kind.left_nullable();
    let ta = touched(left, right, condition, &changed)?;
    let tb = if by_right {
        touched(right, left, condition, &changed)?
    } else {
        Vec::new()
    };
    if ta.is_empty() && tb.is_empty() {
        return Ok(Some(no_change(head, row)));
    }
    let set = |parts: &[String]| -> String {
        if parts.is_empty() {
            format!("SELECT NULL::pg_catalog.bytea AS {id} WHERE false")
        } else {
            parts.join(" UNION ALL ")
        }
    };
    let mut with = format!(
        "__pgt_ta AS (SELECT DISTINCT t.{id} FROM ({}) AS t WHERE {go}), {}",
        set(&ta),
        super::ranges::ranges(
            "__pgt_ta",
            "JOIN_KEY",
            &[format!("__pgt_t.{id}::pgtrickle.row_id")]
        ),
    );
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    let weight = ["1 AS \"__pgt_w\"".to_string()];
    // The level's rows now of the side `side` (its identity in the `WITH` part `set`), where
    // the left side is there or not.
    let fresh = |side: &Plan, set: &str, left_is_there: bool| -> Result<String, NotDifferential> {
        let side_id = level_identity(side).map_err(unrenderable)?;
        let there = presence(left).sql;
        let there = if left_is_there {
            there
        } else {
            format!("NOT ({there})")
        };
        level_where(
            plan,
            &names,
            true,
            false,
            &|_| None,
            &weight,
            &[
                there,
                format!("({side_id}) IN (SELECT t.{id} FROM {set} AS t)"),
            ],
        )
        .map_err(unrenderable)
    };
    // The rows of the touched left rows now, and their stored copies before.
    let mut delta = vec![
        fresh(left, "__pgt_ta", true)?,
        super::ranges::stored_in_ranges(storage, &names),
    ];
    if by_right {
        // The touched right rows without a left side: now, and their stored copies.
        with.push_str(&format!(
            "__pgt_tb AS (SELECT DISTINCT t.{id} FROM ({}) AS t WHERE {go}), ",
            set(&tb)
        ));
        delta.push(fresh(right, "__pgt_tb", false)?);
        let stored: Vec<String> = names
            .iter()
            .map(|n| format!("s.{}", quote_ident(n)))
            .collect();
        delta.push(format!(
            "SELECT s.{id}, {}, -1 AS \"__pgt_w\" FROM {storage} AS s \
             WHERE s.{id} IN (SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', \
               ROW(NULL::pgtrickle.row_id, t.{id}::pgtrickle.row_id)) FROM __pgt_tb AS t)",
            stored.join(", ")
        ));
    }
    Ok(Some(apply_signed(
        plan,
        frame,
        &format!("{head}{with}"),
        &delta,
    )))
}
