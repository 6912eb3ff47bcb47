//! The bookkeeping of a `numeric` sum's scale under the additive aggregate rule
//! (spec/stream-tables.md §5.5), checked against a model without a server: a group's inputs
//! are a multiset of scales; random windows insert scales and delete inputs the group has;
//! the rule's new largest scale and its count (the SQL of `scale_max` and `scale_count` in
//! `src/delta/aggregate.rs`, restated here with SQL's NULL semantics) must equal the
//! multiset's own whenever the rule does not ask for a recomputation, and it asks only when
//! the last input of the largest scale goes while inputs remain. The SQL itself is checked
//! on the server (pg-trickle-ext's oracle compares sums as text).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;

/// SQL's `GREATEST`: NULLs ignored.
fn greatest(a: Option<i32>, b: Option<i32>) -> Option<i32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// What the statement computes per group from the stored `(ms, msc)` and the window's rows
/// `(scale, weight)`: the new largest scale, its count, and whether the group is recomputed.
fn rule(ms: Option<i32>, msc: i64, nn: i64, window: &[(i32, i64)]) -> (Option<i32>, i64, bool) {
    // __pgt_agg: mall (the window's largest scale), sall (the weight of its inputs of that
    // scale), mi (the inserted inputs' largest scale), dnn.
    let mall = window.iter().map(|(s, _)| *s).max();
    let sall: Option<i64> = mall.and_then(|m| {
        let w: Vec<i64> = window
            .iter()
            .filter(|(s, _)| *s == m)
            .map(|(_, w)| *w)
            .collect();
        (!w.is_empty()).then(|| w.iter().sum())
    });
    let mi = window.iter().filter(|(_, w)| *w > 0).map(|(s, _)| *s).max();
    let dnn: i64 = window.iter().map(|(_, w)| *w).sum();
    // scale_max, scale_count (a comparison with NULL is not true).
    let m = greatest(ms, mi);
    let above = matches!((mall, ms), (Some(a), Some(b)) if a > b);
    let at = matches!((mall, ms), (Some(a), Some(b)) if a == b);
    let c = if m.is_none() {
        0
    } else if ms.is_none() || above {
        sall.unwrap_or(0)
    } else {
        msc + if at { sall.unwrap_or(0) } else { 0 }
    };
    let nn_new = nn + dnn;
    let dirty = nn_new > 0 && c <= 0;
    // The hidden columns written when not recomputed.
    if nn_new == 0 {
        (None, 0, dirty)
    } else {
        (m, c, dirty)
    }
}

/// The group's own largest scale and how many inputs have it.
fn truth(scales: &[i32]) -> (Option<i32>, i64) {
    let m = scales.iter().copied().max();
    let c = m.map_or(0, |m| scales.iter().filter(|s| **s == m).count() as i64);
    (m, c)
}

proptest! {
    #[test]
    fn the_scale_count_is_exact_or_asks_for_a_recomputation(
        start in proptest::collection::vec(0i32..5, 0..12),
        windows in proptest::collection::vec(
            (proptest::collection::vec(0i32..6, 0..5), proptest::collection::vec(any::<prop::sample::Index>(), 0..5)),
            1..8,
        ),
    ) {
        let mut group = start.clone();
        let (mut ms, mut msc) = truth(&group);
        for (inserts, deletes) in windows {
            let mut window: Vec<(i32, i64)> = Vec::new();
            let mut after = group.clone();
            for d in deletes {
                if after.is_empty() {
                    break;
                }
                let s = after.remove(d.index(after.len()));
                window.push((s, -1));
            }
            for s in inserts {
                after.push(s);
                window.push((s, 1));
            }
            let (m, c, dirty) = rule(ms, msc, group.len() as i64, &window);
            let (tm, tc) = truth(&after);
            if dirty {
                // Recomputed: the fill's own values.
                (ms, msc) = (tm, tc);
            } else {
                prop_assert_eq!((m, c), (tm, tc), "window {:?} over {:?}", window, group);
                (ms, msc) = (m, c);
            }
            // Recomputation is asked for only when the largest scale lost its last input
            // while inputs remain.
            let lost_last_top = !after.is_empty()
                && truth(&group).0.is_some_and(|top| {
                    !after.contains(&top) && window.iter().all(|(s, _)| *s <= top)
                });
            prop_assert_eq!(dirty, lost_last_top, "window {:?} over {:?}", window, group);
            group = after;
        }
    }
}
