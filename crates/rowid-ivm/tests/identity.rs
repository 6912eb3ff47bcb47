//! The identity rules of spec/stream-tables.md §2 and their SQL (§3), without a server:
//! snapshots of the SQL each operator's identity is derived with, and a model that evaluates
//! small plans over random tables, encodes every output row's identity by the rule with
//! `rowid-codec`, and checks what the rule claims: an identity said unique is never shared by
//! two rows, equal keyless rows share theirs (one per copy), every identity decodes in its
//! rule's domain, and the join's identity does not depend on how its inputs were nested.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use rowid_codec::validate;
use rowid_ivm::identity::{Identity, branch_identity, identity, identity_sql, max_len};
use rowid_ivm::plan::{Plan, SetOpKind};

mod model;
use model::{Row, cond, encode, encode_with, group_by_v, join, keyed, keyless, out, stored};

#[test]
fn the_sql_of_every_operator_s_identity() {
    let scalar = Plan::Aggregate {
        input: Box::new(keyed("x")),
        group_by: vec![],
        columns: vec![out("n", "count(*)")],
        calls: vec![],
    };
    let distinct = Plan::Distinct {
        input: Box::new(Plan::Project {
            input: Box::new(keyed("x")),
            columns: vec![out("v", "x.v")],
        }),
    };
    let union_all = vec![keyed("x"), keyless("z")];
    let intersect_all = Plan::SetOp {
        op: SetOpKind::Intersect,
        all: true,
        branches: vec![keyed("x"), keyed("y")],
    };
    let filtered = Plan::Filter {
        input: Box::new(keyed("x")),
        predicate: cond("x.v > 0"),
    };
    let cases = [
        ("scan, keyed", identity(&keyed("x"))),
        ("scan, keyless", identity(&keyless("z"))),
        ("filter: passed through", identity(&filtered)),
        (
            "join of three",
            identity(&join(vec![keyed("x"), keyed("y"), keyless("z")])),
        ),
        ("group by", identity(&group_by_v(keyed("x"), "x"))),
        ("aggregate without group by", identity(&scalar)),
        ("distinct", identity(&distinct)),
        (
            "union all, branch 2",
            branch_identity(&union_all, 2).unwrap(),
        ),
        ("intersect all", identity(&intersect_all)),
        (
            "full join of a keyed and a keyless scan",
            identity(&Plan::OuterJoin {
                kind: rowid_ivm::plan::OuterKind::Full,
                left: Box::new(keyed("x")),
                right: Box::new(keyless("z")),
                condition: cond("z.a = x.v"),
            }),
        ),
        (
            "left join: the right side nullable",
            identity(&Plan::OuterJoin {
                kind: rowid_ivm::plan::OuterKind::Left,
                left: Box::new(keyed("x")),
                right: Box::new(keyed("y")),
                condition: cond("y.v = x.v"),
            }),
        ),
    ];
    let text: String = cases
        .iter()
        .map(|(what, id)| {
            format!(
                "{what} ({}, {}):\n  {}\n",
                id.domain.name(),
                if id.unique { "unique" } else { "multiset" },
                identity_sql(id)
            )
        })
        .collect();
    insta::assert_snapshot!(text);
}

/// A stream table read by another passes its stored identity through: a filter keeps the
/// bytes, a join frames them as a child, and the downstream's identities are those of the
/// same query with the upstream's query in its place as a subquery (spec/stream-tables.md §2).
#[test]
fn a_stream_table_read_downstream_passes_its_identity_through() {
    let upstream = group_by_v(keyed("x"), "x");
    let up = identity(&upstream);
    let s = stored("s", up.domain, up.unique);
    let filtered = Plan::Filter {
        input: Box::new(s.clone()),
        predicate: cond("s.v > 0"),
    };
    assert_eq!(identity_sql(&identity(&filtered)), "s.__pgt_row_id");
    assert_eq!(identity(&filtered).domain, rowid_codec::Domain::GroupKey);
    let joined = Plan::inner_join(vec![s.clone(), keyed("y")], Some(cond("s.v = y.v")));
    assert_eq!(
        identity_sql(&identity(&joined)),
        "pgtrickle.encode_row_id_v2('JOIN_KEY', ROW((s.__pgt_row_id)::pgtrickle.row_id, \
         (pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(y.k)))::pgtrickle.row_id))"
    );
    let inlined = Plan::inner_join(
        vec![
            Plan::Subquery {
                alias: "s".into(),
                columns: vec!["v".into(), "n".into()],
                input: Box::new(upstream),
            },
            keyed("y"),
        ],
        Some(cond("s.v = y.v")),
    );
    for v in [None, Some(i64::MIN), Some(-1), Some(0), Some(7)] {
        for k in [1, i64::MAX] {
            let row: Row = [("x.v".to_string(), v), ("y.k".to_string(), Some(k))].into();
            let stored_bytes = encode(&up, &row);
            let read = |column: &str| {
                assert_eq!(column, "s.__pgt_row_id");
                stored_bytes.clone()
            };
            assert_eq!(encode_with(&identity(&filtered), &row, &read), stored_bytes);
            let via_stored = encode_with(&identity(&joined), &row, &read);
            validate(&via_stored).expect("a valid identity");
            assert_eq!(via_stored, encode(&identity(&inlined), &row));
        }
    }
    // The bound is the upstream's; a child counts it escaped and terminated.
    assert_eq!(max_len(&identity(&s), &|_| None), Some(40));
    assert_eq!(max_len(&identity(&joined), &|_| None), None);
    assert!(max_len(&identity(&joined), &|_| Some(10)).unwrap() > 2 * 40);
    // A multiset upstream makes its readers multisets.
    let bag = stored("b", rowid_codec::Domain::KeylessRow, false);
    assert!(!identity(&Plan::inner_join(vec![bag, keyed("y")], None)).unique);
}

#[test]
fn nested_inner_joins_are_one_join_in_from_order() {
    let nested = Plan::inner_join(
        vec![
            Plan::inner_join(vec![keyed("x"), keyed("y")], Some(cond("x.v = y.v"))),
            keyed("w"),
        ],
        Some(cond("y.v = w.v")),
    );
    let flat = Plan::inner_join(
        vec![keyed("x"), keyed("y"), keyed("w")],
        Some(cond("(x.v = y.v) AND (y.v = w.v)")),
    );
    assert_eq!(nested, flat);
    assert_eq!(identity(&nested), identity(&flat));
    let Plan::Join { inputs, .. } = &nested else {
        panic!("a join")
    };
    assert_eq!(inputs.len(), 3);
}

#[test]
fn uniqueness_follows_the_inputs() {
    assert!(identity(&join(vec![keyed("x"), keyed("y")])).unique);
    assert!(!identity(&join(vec![keyed("x"), keyless("z")])).unique);
    assert!(identity(&group_by_v(keyless("z"), "z")).unique);
    assert!(
        !branch_identity(&[keyed("x"), keyless("z")], 1)
            .unwrap()
            .unique
    );
    assert!(
        branch_identity(&[keyed("x"), keyed("y")], 2)
            .unwrap()
            .unique
    );
    assert_eq!(branch_identity(&[keyed("x")], 2), None);
    for (all, unique) in [(false, true), (true, false)] {
        let op = Plan::SetOp {
            op: SetOpKind::Except,
            all,
            branches: vec![keyless("z"), keyless("z2")],
        };
        assert_eq!(identity(&op).unique, unique);
    }
}

fn scan_rows(alias: &str, cols: &[&str], rows: &[Vec<Option<i64>>]) -> Vec<Row> {
    rows.iter()
        .map(|r| {
            cols.iter()
                .zip(r)
                .map(|(c, v)| (format!("{alias}.{c}"), *v))
                .collect()
        })
        .collect()
}

/// Inner join of `left` and `right` where `left.lv = right.rv` (NULL matches nothing).
fn join_rows(left: &[Row], right: &[Row], lv: &str, rv: &str) -> Vec<Row> {
    let mut out = Vec::new();
    for l in left {
        for r in right {
            if let (Some(Some(a)), Some(Some(b))) = (l.get(lv), r.get(rv))
                && a == b
            {
                out.push(l.iter().chain(r).map(|(k, v)| (k.clone(), *v)).collect());
            }
        }
    }
    out
}

/// Checks the rule's claims over `rows` (the plan's output): unique means no shared identity;
/// every identity decodes in its domain. Returns identity -> copies.
fn check(id: &Identity, rows: &[Row]) -> BTreeMap<Vec<u8>, usize> {
    let mut seen = BTreeMap::new();
    for r in rows {
        let bytes = encode(id, r);
        let summary = validate(&bytes).unwrap();
        assert_eq!(summary.domain, id.domain);
        *seen.entry(bytes).or_insert(0) += 1;
    }
    if id.unique {
        assert!(
            seen.values().all(|&n| n == 1),
            "a unique rule gave two rows one identity"
        );
    }
    seen
}

fn table() -> impl Strategy<Value = Vec<Vec<Option<i64>>>> {
    // Keys unique (a map), values small and sometimes NULL so that joins and groups meet.
    proptest::collection::btree_map(0i64..40, proptest::option::of(0i64..4), 0..12)
        .prop_map(|m| m.into_iter().map(|(k, v)| vec![Some(k), v]).collect())
}

fn bag() -> impl Strategy<Value = Vec<Vec<Option<i64>>>> {
    proptest::collection::vec(
        proptest::collection::vec(proptest::option::of(0i64..3), 2),
        0..12,
    )
}

proptest! {
    #[test]
    fn the_rules_hold_on_the_model(x in table(), y in table(), z in bag()) {
        let xs = scan_rows("x", &["k", "v"], &x);
        let ys = scan_rows("y", &["k", "v"], &y);
        let zs = scan_rows("z", &["a", "b"], &z);

        // Scans: keyed unique; keyless copies share one identity each.
        check(&identity(&keyed("x")), &xs);
        let copies = check(&identity(&keyless("z")), &zs);
        let mut by_value: BTreeMap<Vec<Option<i64>>, usize> = BTreeMap::new();
        for r in &z {
            *by_value.entry(r.clone()).or_insert(0) += 1;
        }
        prop_assert_eq!(
            copies.values().copied().collect::<Vec<_>>().iter().sum::<usize>(),
            z.len()
        );
        prop_assert_eq!(copies.len(), by_value.len());

        // A join of keyed inputs is unique; with a keyless input, each output row's copies
        // are the keyless input's copies.
        let xy = join_rows(&xs, &ys, "x.v", "y.v");
        check(&identity(&join(vec![keyed("x"), keyed("y")])), &xy);
        let xz = join_rows(&xs, &zs, "x.v", "z.a");
        check(&identity(&join(vec![keyed("x"), keyless("z")])), &xz);

        // GROUP BY v over the join: one identity per group, the NULL group included.
        let g = identity(&group_by_v(join(vec![keyed("x"), keyed("y")]), "x"));
        let mut groups: BTreeMap<Option<i64>, Row> = BTreeMap::new();
        for r in &xs {
            groups.insert(r["x.v"], r.clone());
        }
        let grouped: Vec<Row> = groups.into_values().collect();
        check(&g, &grouped);

        // UNION ALL of x and y: branch numbers keep equal keys of the two branches apart.
        let branches = [keyed("x"), keyed("y")];
        let mut ids = BTreeMap::new();
        for (n, rows) in [(1u32, &xs), (2, &ys)] {
            let id = branch_identity(&branches, n).unwrap();
            for r in rows.iter() {
                prop_assert!(ids.insert(encode(&id, r), n).is_none(), "branches collided");
            }
        }
    }
}

/// The window rule finds a partition's stored rows as one range of the identity order
/// (src/delta/window.rs): every identity of the partition `p` starts with the identity of
/// `p` and a NULL child less its last three bytes (the NULL child and `TUPLE_END`), and an
/// identity of any other partition is outside `[prefix, prefix || FF)`.
#[test]
fn a_window_partition_is_one_range_of_the_identity_order() {
    let window = Plan::Window {
        input: Box::new(keyed("x")),
        partition_by: vec![rowid_ivm::plan::Expr::new("x.v", "bigint")],
        columns: vec![out("k", "x.k")],
    };
    let id = identity(&window);
    let values = [
        None,
        Some(i64::MIN),
        Some(-1),
        Some(0),
        Some(1),
        Some(255),
        Some(i64::MAX),
    ];
    let prefix = |v: Option<i64>| {
        // The partition's identity with a NULL child: the model row holds no child key.
        let mut null_child = id.clone();
        null_child.fields[1] = rowid_ivm::identity::Field::NullableChild {
            child: Box::new(identity(&keyed("x"))),
            present: cond("absent"),
        };
        let row: Row = [("x.v".to_string(), v)].into();
        let bytes = encode(&null_child, &row);
        assert_eq!(&bytes[bytes.len() - 3..], &[0x40, 0x00, 0xFF]);
        bytes[..bytes.len() - 3].to_vec()
    };
    for p in values {
        let lo = prefix(p);
        let mut hi = lo.clone();
        hi.push(0xFF);
        for q in values {
            for k in [i64::MIN, -7, 0, 1, 0x00FF, i64::MAX] {
                let row: Row = [("x.v".to_string(), q), ("x.k".to_string(), Some(k))].into();
                let bytes = encode(&id, &row);
                validate(&bytes).expect("a valid identity");
                let inside = bytes >= lo && bytes < hi;
                assert_eq!(inside, p == q, "partition {p:?}, row of {q:?}, key {k}");
                assert_eq!(bytes.starts_with(&lo), p == q);
            }
        }
    }
}
