//! The semi-join rule (spec/stream-tables.md §5.2): a query level whose `WHERE` holds
//! subqueries (`EXISTS`, `IN`, `NOT EXISTS`, `NOT IN`, a scalar subquery) keeps each row of
//! its `FROM` once or not at all, with the row's identity, so the level is linear in its
//! `FROM` items as long as the tables the subqueries read stay as they are.
//!
//! - When no table a subquery reads changed in the window, the level's change is the linear
//!   rule's: its terms evaluate the predicate over those tables now, which is what they were.
//! - When one did, any row can have come or gone (a `NOT IN` meeting a new NULL drops every
//!   row), so the level's rows now (+1) and its stored rows (-1) are applied as signed rows:
//!   the level is read again, but only the rows whose values changed are written.
//!
//! Which case holds is decided by the statement itself (the window's rows of the subqueries'
//! tables), so one statement serves every refresh; the branch not taken is a one-time filter
//! the executor never enters.

use rowid_registry::sql::quote_ident;

use super::{Frame, NotDifferential, apply_signed, linear_delta, no_change};
use crate::plan::Plan;
use crate::sql::{ROW_ID, level_where};

/// The semi-join of a top-level `SELECT` without aggregates, `DISTINCT` or windows, and the
/// tables its subqueries read; `None` for any other tree.
pub(super) fn top_level(plan: &Plan) -> Option<(&Plan, &[String])> {
    let Plan::Project { input, .. } = plan else {
        return None;
    };
    let mut p = &**input;
    while let Plan::Filter { input, .. } = p {
        p = input;
    }
    match p {
        Plan::SemiJoin { input, reads, .. } => Some((input, reads)),
        _ => None,
    }
}

/// Whether `plan` is a level this rule applies to, or has no semi-join at all: a semi-join
/// anywhere else (in a subquery, under an aggregate, `DISTINCT` or a window, in a set
/// operation, over a subquery or an outer join in `FROM`) has no rule. Returns the refusal.
pub(super) fn refusal(plan: &Plan) -> Option<String> {
    let top = top_level(plan).map(|(input, _)| input);
    let mut found = 0usize;
    crate::identity::walk(plan, &mut |p| {
        found += usize::from(matches!(p, Plan::SemiJoin { .. }))
    });
    if found == 0 {
        return None;
    }
    let Some(from) = top.filter(|_| found == 1) else {
        return Some(
            "a SemiJoin (a subquery in WHERE) other than in the top level of a query \
             without aggregates, DISTINCT, windows or set operations"
                .into(),
        );
    };
    let mut other = None;
    crate::identity::walk(from, &mut |p| {
        if other.is_none() && matches!(p, Plan::Subquery { .. } | Plan::OuterJoin { .. }) {
            other = Some(crate::identity::name(p));
        }
    });
    other.map(|o| format!("a SemiJoin (a subquery in WHERE) over a {o} in FROM"))
}

/// The statement of a level this rule applies to, or `None` for any other tree.
pub(super) fn statement(plan: &Plan, frame: &Frame<'_>) -> Result<Option<String>, NotDifferential> {
    if top_level(plan).is_none() {
        return Ok(None);
    }
    let Frame {
        storage,
        changeable,
        head,
        row,
        reads_changed,
        ..
    } = *frame;
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    let id = quote_ident(ROW_ID);
    let mut delta = Vec::new();
    if reads_changed != "true" {
        // The linear rule's terms, taken when no table a subquery reads changed.
        let gate = |term: String| -> String {
            if reads_changed == "false" {
                term
            } else {
                format!("SELECT d.* FROM ({term}) AS d WHERE NOT ({reads_changed})")
            }
        };
        delta.extend(
            linear_delta(plan, &names, changeable)?
                .into_iter()
                .map(gate),
        );
    }
    if reads_changed != "false" {
        // The level's rows now, and its stored rows (under the statement's own test, unless
        // it is known).
        let only: Vec<String> = if reads_changed == "true" {
            Vec::new()
        } else {
            vec![reads_changed.to_string()]
        };
        let fresh = level_where(
            plan,
            &names,
            true,
            false,
            &|_| None,
            &["1 AS \"__pgt_w\"".to_string()],
            &only,
        )
        .map_err(|e| NotDifferential(e.0))?;
        let stored: Vec<String> = std::iter::once(format!("s.{id}"))
            .chain(names.iter().map(|n| format!("s.{}", quote_ident(n))))
            .chain(std::iter::once("-1 AS \"__pgt_w\"".to_string()))
            .collect();
        delta.push(fresh);
        let mut stored = format!("SELECT {} FROM {storage} AS s", stored.join(", "));
        if let Some(test) = only.first() {
            stored.push_str(&format!(" WHERE {test}"));
        }
        delta.push(stored);
    }
    if delta.is_empty() {
        return Ok(Some(no_change(head, row)));
    }
    Ok(Some(apply_signed(plan, frame, head, &delta)))
}
