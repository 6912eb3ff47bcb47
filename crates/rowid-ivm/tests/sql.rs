//! The statement a FULL refresh stores (spec/stream-tables.md §4), without a server:
//! snapshots of the SQL `rowid_ivm::sql::full_query` renders for every operator and the
//! scoped blocks between them (a subquery, `DISTINCT`, the branches of set operations), the
//! refusal of a tree no reader builds, and the worst-case identity lengths the index plan is
//! chosen by. That the SQL computes the query and the identities of §3 is shown on the server
//! (pg-trickle-ext's `full_refresh_keeps_every_operator_equal_to_its_query_...`).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_ivm::identity::{identity, max_len};
use rowid_ivm::plan::{OuterKind, Plan, SetOpKind};
use rowid_ivm::sql::full_query;

mod model;
use model::{cond, group_by_v, join, keyed, keyless, out};

fn outer(kind: OuterKind, left: Plan, right: Plan, on: &str) -> Plan {
    Plan::OuterJoin {
        kind,
        left: Box::new(left),
        right: Box::new(right),
        condition: cond(on),
    }
}

fn project(input: Plan, columns: &[(&str, &str)]) -> Plan {
    Plan::Project {
        input: Box::new(input),
        columns: columns.iter().map(|(n, s)| out(n, s)).collect(),
    }
}

#[test]
fn the_full_refresh_sql_of_every_operator() {
    let filtered = project(
        Plan::Filter {
            input: Box::new(keyed("x")),
            predicate: cond("x.v > 0"),
        },
        &[("k", "x.k"), ("twice", "x.v * 2")],
    );
    let joined = project(
        join(vec![keyed("x"), keyed("y"), keyless("z")]),
        &[("k", "x.k"), ("a", "z.a")],
    );
    let grouped = Plan::Filter {
        input: Box::new(group_by_v(keyed("x"), "x")),
        predicate: cond("count(*) > 1"),
    };
    let scalar = Plan::Aggregate {
        input: Box::new(keyed("x")),
        group_by: vec![],
        columns: vec![out("n", "count(*)")],
        calls: vec![],
    };
    let distinct = Plan::Distinct {
        input: Box::new(project(keyed("x"), &[("v", "x.v")])),
    };
    let sub = Plan::Subquery {
        alias: "s".into(),
        columns: vec!["v".into(), "n".into()],
        input: Box::new(group_by_v(keyed("x"), "x")),
    };
    let over_subquery = project(
        Plan::inner_join(vec![sub, keyed("y")], Some(cond("s.v = y.v"))),
        &[("v", "s.v"), ("n", "s.n"), ("k", "y.k")],
    );
    let union_all = Plan::UnionAll {
        branches: vec![
            project(keyed("x"), &[("k", "x.k")]),
            project(keyless("z"), &[("a", "z.a")]),
        ],
    };
    let except_all = Plan::SetOp {
        op: SetOpKind::Except,
        all: true,
        branches: vec![
            project(keyed("x"), &[("v", "x.v")]),
            project(keyed("y"), &[("v", "y.v")]),
        ],
    };
    let union = Plan::SetOp {
        op: SetOpKind::Union,
        all: false,
        branches: vec![union_all.clone(), project(keyed("y"), &[("k", "y.k")])],
    };
    // x LEFT JOIN (y JOIN z) FULL JOIN a subquery, inner-joined to w: each nullable side's
    // child NULL when the side is not there (a scan's ctid, a block's identity, an inner
    // join's first input).
    let outer_joined = project(
        Plan::inner_join(
            vec![
                outer(
                    OuterKind::Full,
                    outer(
                        OuterKind::Left,
                        keyed("x"),
                        join(vec![keyed("y"), keyless("z")]),
                        "y.k = x.k",
                    ),
                    Plan::Subquery {
                        alias: "s".into(),
                        columns: vec!["v".into(), "n".into()],
                        input: Box::new(group_by_v(keyed("u"), "u")),
                    },
                    "s.v = x.v",
                ),
                keyed("w"),
            ],
            Some(cond("w.k = x.k")),
        ),
        &[("k", "x.k"), ("a", "z.a"), ("n", "s.n")],
    );
    let right_joined = project(
        outer(OuterKind::Right, keyless("z"), keyed("x"), "z.a = x.v"),
        &[("a", "z.a")],
    );
    let windowed = Plan::Window {
        input: Box::new(Plan::Filter {
            input: Box::new(keyed("x")),
            predicate: cond("x.v > 0"),
        }),
        partition_by: vec![cond("x.v")],
        columns: vec![
            out("k", "x.k"),
            out(
                "r",
                "rank() OVER (PARTITION BY x.v ORDER BY x.k ASC NULLS LAST)",
            ),
        ],
    };
    let unnested = project(
        Plan::inner_join(
            vec![
                keyed("x"),
                Plan::Function {
                    alias: "e".into(),
                    call: cond("pg_catalog.unnest(x.arr)"),
                    ordinality: true,
                    columns: vec![out("x", "e.x"), out("n", "e.n")],
                },
            ],
            None,
        ),
        &[("k", "x.k"), ("x", "e.x")],
    );
    let cases = [
        ("filter and projection", filtered),
        ("a set-returning function, with its ordinality", unnested),
        ("window", windowed),
        ("outer joins nested, under an inner join", outer_joined),
        ("right join of a keyless source", right_joined),
        ("join of three, one keyless", joined),
        ("group by with having", grouped),
        ("aggregate without group by", scalar),
        ("distinct", distinct),
        ("a subquery joined", over_subquery),
        ("union all", union_all),
        ("except all", except_all),
        ("union over a union all", union),
    ];
    let text: String = cases
        .iter()
        .map(|(what, plan)| format!("{what}:\n  {}\n", full_query(plan).unwrap()))
        .collect();
    insta::assert_snapshot!(text);
}

#[test]
fn a_tree_no_reader_builds_is_refused() {
    let bare_filter = Plan::Filter {
        input: Box::new(Plan::UnionAll { branches: vec![] }),
        predicate: cond("true"),
    };
    let err = full_query(&Plan::Distinct {
        input: Box::new(bare_filter),
    })
    .unwrap_err();
    assert!(err.to_string().contains("select list"), "{err}");
}

#[test]
fn identity_bounds_add_up_by_the_wire_format() {
    // Each bigint value field: 2 bytes of tag and state, 8 of payload.
    let value = |_: &rowid_ivm::plan::Expr| Some(10);
    // SCAN_KEY(k): 7 bytes outside the fields, one field.
    assert_eq!(max_len(&identity(&keyed("x")), &value), Some(17));
    // JOIN_KEY of two SCAN_KEYs: each child escaped (at worst doubled) and terminated.
    assert_eq!(
        max_len(&identity(&join(vec![keyed("x"), keyed("y")])), &value),
        Some(7 + 2 * (2 + 2 * 17 + 2))
    );
    // SYNTHETIC: the discriminator text escaped and terminated.
    let scalar = Plan::Aggregate {
        input: Box::new(keyed("x")),
        group_by: vec![],
        columns: vec![],
        calls: vec![],
    };
    assert_eq!(
        max_len(&identity(&scalar), &value),
        Some(7 + 2 + 2 * 26 + 2)
    );
    // One unbounded field makes the identity unbounded.
    assert_eq!(max_len(&identity(&keyless("z")), &|_| None), None);
}

/// The change buffer of `alias`'s table, its columns `k` and `v` (keyless `y`: `a`, `b`).
fn buffer(alias: &str) -> rowid_ivm::delta::SourceBuffer {
    rowid_ivm::delta::SourceBuffer {
        relation: format!("public.{alias}_t"),
        buffer: format!("\"pgtrickle_changes\".\"changes_{alias}\""),
        columns: if alias == "y" {
            vec![("a".into(), "bigint".into()), ("b".into(), "bigint".into())]
        } else {
            vec![("k".into(), "bigint".into()), ("v".into(), "bigint".into())]
        },
    }
}

#[test]
fn the_differential_statements_of_one_source() {
    use rowid_ivm::delta::delta_statement;
    use rowid_registry::IndexClass;
    let linear = project(
        Plan::Filter {
            input: Box::new(keyed("x")),
            predicate: cond("x.v > 0"),
        },
        &[("k", "x.k"), ("twice", "x.v * 2")],
    );
    let grouped = Plan::Filter {
        input: Box::new(group_by_v(keyed("x"), "x")),
        predicate: cond("count(*) > 1"),
    };
    let joined = project(
        Plan::inner_join(vec![keyed("x"), keyless("y")], Some(cond("x.v = y.a"))),
        &[("k", "x.k"), ("b", "y.b")],
    );
    let union_all = Plan::UnionAll {
        branches: vec![
            project(keyed("x"), &[("v", "x.v")]),
            project(keyless("y"), &[("v", "y.a")]),
        ],
    };
    let over_subquery = project(
        Plan::inner_join(
            vec![
                Plan::Subquery {
                    alias: "s".into(),
                    columns: vec!["v".into()],
                    input: Box::new(project(keyed("x"), &[("v", "x.v")])),
                },
                keyed("y"),
            ],
            Some(cond("s.v = y.v")),
        ),
        &[("v", "s.v"), ("k", "y.k")],
    );
    let aggregate_subquery = project(
        Plan::inner_join(
            vec![
                Plan::Subquery {
                    alias: "s".into(),
                    columns: vec!["v".into(), "n".into()],
                    input: Box::new(group_by_v(keyed("x"), "x")),
                },
                keyed("y"),
            ],
            Some(cond("s.v = y.v")),
        ),
        &[("n", "s.n"), ("k", "y.k")],
    );
    let text: String = [
        (
            "an aggregating subquery joined",
            &aggregate_subquery,
            IndexClass::DirectUnique,
        ),
        (
            "a subquery joined",
            &over_subquery,
            IndexClass::DirectUnique,
        ),
        (
            "union all of a keyed and a keyless branch",
            &union_all,
            IndexClass::DirectNonUnique,
        ),
        (
            "join of two: three terms",
            &joined,
            IndexClass::DirectNonUnique,
        ),
        (
            "linear, direct unique index",
            &linear,
            IndexClass::DirectUnique,
        ),
        ("linear, probe index", &linear, IndexClass::ProbeExpression),
        ("aggregate", &grouped, IndexClass::DirectUnique),
    ]
    .iter()
    .map(|(what, plan, class)| {
        format!(
            "{what}:\n  {}\n",
            delta_statement(
                plan,
                "\"public\".\"st\"",
                *class,
                &[buffer("x"), buffer("y")]
            )
            .unwrap()
        )
    })
    .collect();
    insta::assert_snapshot!(text);
}

/// A DIFFERENTIAL refresh reads each buffer once, into its window: buffers carry no index,
/// so every other read of one is a scan of everything it holds (the last `seq` this
/// transaction wrote was such a scan, of every buffer, until it was read from the windows).
#[test]
fn every_buffer_is_scanned_once_per_refresh() {
    use rowid_ivm::delta::delta_statement;
    use rowid_registry::IndexClass;
    let linear = project(keyed("x"), &[("k", "x.k"), ("v", "x.v")]);
    let joined = project(
        Plan::inner_join(vec![keyed("x"), keyless("y")], Some(cond("x.v = y.a"))),
        &[("k", "x.k"), ("b", "y.b")],
    );
    let recomputed = Plan::Filter {
        input: Box::new(group_by_v(keyed("x"), "x")),
        predicate: cond("count(*) > 1"),
    };
    let cases = [
        (&linear, IndexClass::DirectUnique, 1),
        (&linear, IndexClass::ProbeExpression, 1),
        (&joined, IndexClass::DirectNonUnique, 2),
        (&recomputed, IndexClass::DirectUnique, 1),
        (&additive(true), IndexClass::DirectUnique, 1),
        (&additive(false), IndexClass::DirectUnique, 1),
    ];
    for (plan, class, read) in cases {
        let statement = delta_statement(
            plan,
            "\"public\".\"st\"",
            class,
            &[buffer("x"), buffer("y")],
        )
        .unwrap();
        let scans = |alias: &str| {
            statement
                .matches(&format!("\"pgtrickle_changes\".\"changes_{alias}\""))
                .count()
        };
        assert_eq!(scans("x") + scans("y"), read, "{class:?}: {statement}");
        assert!(scans("x") <= 1 && scans("y") <= 1, "{class:?}: {statement}");
    }
}

/// The in-place update of a unique identity pairs an identity's old and new representation
/// without joining the change with itself: the server cannot estimate a change read from a
/// buffer it never analyzed, and a nested loop of the change over itself was quadratic (10^4
/// changed rows of a one-source stream table: 90 s, where the statement now takes 0.35 s;
/// `cargo xtask bench --quick --only locality`, section 8b).
#[test]
fn the_unique_rule_never_joins_the_change_with_itself() {
    use rowid_ivm::delta::delta_statement;
    use rowid_registry::IndexClass;
    let linear = project(keyed("x"), &[("k", "x.k"), ("v", "x.v")]);
    for class in [IndexClass::DirectUnique, IndexClass::ProbeExpression] {
        let statement =
            delta_statement(&linear, "\"public\".\"st\"", class, &[buffer("x")]).unwrap();
        assert!(statement.contains("__pgt_moved AS"), "{statement}");
        for change in ["__pgt_delta", "__pgt_net", "__pgt_side", "__pgt_moved"] {
            assert!(
                !statement.contains(&format!("JOIN {change} ")),
                "{class:?}: {change} joined: {statement}"
            );
        }
    }
}

#[test]
fn operators_without_a_delta_rule_are_named() {
    use rowid_ivm::delta::delta_statement;
    use rowid_registry::IndexClass;
    let seven: Vec<Plan> = ["a", "b", "c", "d", "e", "f", "g"]
        .iter()
        .map(|a| keyed(a))
        .collect();
    let buffers: Vec<_> = ["a", "b", "c", "d", "e", "f", "g"]
        .iter()
        .map(|a| buffer(a))
        .collect();
    let err = delta_statement(
        &project(Plan::inner_join(seven, None), &[("k", "a.k")]),
        "st",
        IndexClass::DirectUnique,
        &buffers,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "DIFFERENTIAL refresh of a join of 7 tables (at most 6) is not built yet"
    );
    // An outer join has one as a level's only FROM item over two scans; none elsewhere.
    delta_statement(
        &project(
            outer(OuterKind::Left, keyed("a"), keyed("b"), "a.k = b.k"),
            &[("k", "a.k")],
        ),
        "st",
        IndexClass::DirectUnique,
        &buffers[..2],
    )
    .unwrap();
    for (plan, named) in [
        (
            project(
                Plan::Subquery {
                    alias: "s".into(),
                    columns: vec!["k".into()],
                    input: Box::new(project(
                        outer(OuterKind::Full, keyed("a"), keyed("b"), "a.k = b.k"),
                        &[("k", "a.k")],
                    )),
                },
                &[("k", "s.k")],
            ),
            "FullJoin",
        ),
        (
            project(
                Plan::inner_join(
                    vec![
                        outer(OuterKind::Right, keyed("a"), keyed("b"), "a.k = b.k"),
                        keyed("c"),
                    ],
                    Some(cond("c.k = b.k")),
                ),
                &[("k", "b.k")],
            ),
            "RightJoin",
        ),
    ] {
        let err =
            delta_statement(&plan, "st", IndexClass::DirectUnique, &buffers[..3]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "DIFFERENTIAL refresh of a {named} other than a level's only FROM item over \
                 two tables is not built yet"
            )
        );
    }
    // A subquery that aggregates has a delta rule (its rows now less its rows before the
    // change, for the groups the change touches); one that deduplicates an aggregate's rows
    // has none, and is named.
    let subquery = |input: Plan| {
        project(
            Plan::Subquery {
                alias: "s".into(),
                columns: vec!["v".into(), "n".into()],
                input: Box::new(input),
            },
            &[("v", "s.v")],
        )
    };
    delta_statement(
        &subquery(group_by_v(keyed("x"), "x")),
        "st",
        IndexClass::DirectUnique,
        &[buffer("x")],
    )
    .unwrap();
    let err = delta_statement(
        &subquery(Plan::Distinct {
            input: Box::new(group_by_v(keyed("x"), "x")),
        }),
        "st",
        IndexClass::DirectUnique,
        &[buffer("x")],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "DIFFERENTIAL refresh of a Distinct is not built yet"
    );
    // An aggregate over an aggregating subquery, in a subquery, and a UNION ALL reading one:
    // both have a rule (the inner one's rows before are its rows now but the touched
    // identities', and its negative images).
    let nested = subquery(Plan::Aggregate {
        input: Box::new(Plan::Subquery {
            alias: "i".into(),
            columns: vec!["v".into(), "n".into()],
            input: Box::new(group_by_v(keyed("x"), "x")),
        }),
        group_by: vec![],
        columns: vec![out("v", "count(*)"), out("n", "sum(i.n)")],
        calls: vec![],
    });
    let statement =
        delta_statement(&nested, "st", IndexClass::DirectUnique, &[buffer("x")]).unwrap();
    assert!(
        statement.contains("__pgt_sub1 AS MATERIALIZED"),
        "{statement}"
    );
    let union_all = Plan::UnionAll {
        branches: vec![
            subquery(group_by_v(keyed("x"), "x")),
            project(keyed("x"), &[("v", "x.v")]),
        ],
    };
    delta_statement(
        &union_all,
        "st",
        IndexClass::DirectNonUnique,
        &[buffer("x")],
    )
    .unwrap();
}

/// A level reading a subquery that aggregates is applied by identity: the subquery's rows
/// now and before may spell an unchanged value differently (`min` of `2.0` and `2.00`), and
/// a stored row matched by representation was left stale (the oracle's `o_nest`).
#[test]
fn a_level_over_an_aggregating_subquery_matches_by_identity() {
    use rowid_ivm::delta::delta_statement;
    use rowid_registry::IndexClass;
    let plan = project(
        Plan::Subquery {
            alias: "s".into(),
            columns: vec!["v".into(), "n".into()],
            input: Box::new(group_by_v(keyed("x"), "x")),
        },
        &[("v", "s.v"), ("n", "s.n")],
    );
    let statement = delta_statement(&plan, "st", IndexClass::DirectUnique, &[buffer("x")]).unwrap();
    assert!(
        statement.contains("__pgt_sub0 AS MATERIALIZED"),
        "{statement}"
    );
    let apply = &statement[statement.find("), __pgt_touched AS").expect(&statement)..];
    assert!(!apply.contains("__pgt_rep"), "{apply}");
}

/// An aggregate of every additive call over `x` (keyed `(k, v)`), grouped by `x.v` or not.
fn additive(grouped: bool) -> Plan {
    use rowid_ivm::plan::{AggregateFunc, ArgClass, Call, Expr};
    let numeric = Expr::new("(x.v)::numeric", "numeric");
    let call = |func, arg: Option<Expr>, arg_class| Call::Aggregate {
        func,
        arg,
        arg_class,
    };
    let mut columns = vec![
        out("n", "count(*)"),
        out("s", "sum((x.v)::numeric)"),
        out("a", "avg(x.k)"),
        out("lo", "min(x.k)"),
    ];
    let mut calls = vec![
        call(AggregateFunc::Count, None, ArgClass::Other),
        call(AggregateFunc::Sum, Some(numeric), ArgClass::Numeric),
        call(AggregateFunc::Avg, Some(model::e("x.k")), ArgClass::Integer),
        call(AggregateFunc::Min, Some(model::e("x.k")), ArgClass::Integer),
    ];
    if grouped {
        columns.insert(0, out("v", "x.v"));
        calls.insert(0, Call::Group);
    }
    Plan::Aggregate {
        input: Box::new(keyed("x")),
        group_by: if grouped {
            vec![model::e("x.v")]
        } else {
            vec![]
        },
        columns,
        calls,
    }
}

#[test]
fn the_additive_aggregate_rule_keeps_hidden_columns_and_adds_the_change() {
    use rowid_ivm::delta::{delta_statement, is_additive, storage_plan, storage_query};
    use rowid_ivm::plan::{AggregateFunc, ArgClass, Call};
    use rowid_registry::IndexClass;
    let grouped = additive(true);
    let names: Vec<String> = storage_plan(&grouped)
        .outputs()
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(
        names,
        [
            "v",
            "n",
            "s",
            "a",
            "lo",
            "__pgt_count",
            "__pgt_nn_3",
            "__pgt_ms_3",
            "__pgt_msc_3",
            "__pgt_nn_4",
            "__pgt_sum_4",
        ]
    );
    // Not additive: a float sum, an expression over an aggregate, HAVING.
    let mut float = additive(true);
    if let Plan::Aggregate { calls, .. } = &mut float {
        calls[2] = Call::Aggregate {
            func: AggregateFunc::Sum,
            arg: Some(model::e("x.v")),
            arg_class: ArgClass::Other,
        };
    }
    let mut other = additive(true);
    if let Plan::Aggregate { calls, .. } = &mut other {
        calls[1] = Call::Other;
    }
    let having = Plan::Filter {
        input: Box::new(additive(true)),
        predicate: cond("count(*) > 1"),
    };
    for plan in [&float, &other, &having] {
        assert!(!is_additive(plan));
        assert_eq!(&storage_plan(plan), plan);
    }
    let text: String = [
        (
            "grouped, direct unique",
            additive(true),
            IndexClass::DirectUnique,
        ),
        (
            "grouped, probe",
            additive(true),
            IndexClass::ProbeExpression,
        ),
        ("no GROUP BY", additive(false), IndexClass::DirectUnique),
    ]
    .iter()
    .map(|(what, plan, class)| {
        format!(
            "{what}:\n  storage: {}\n  delta: {}\n",
            storage_query(plan).unwrap(),
            delta_statement(plan, "\"public\".\"st\"", *class, &[buffer("x")]).unwrap()
        )
    })
    .collect();
    insta::assert_snapshot!(text);
}

#[test]
fn the_window_rule_recomputes_touched_partitions_and_reads_their_stored_range() {
    use rowid_ivm::delta::delta_statement;
    use rowid_registry::IndexClass;
    let windowed = |partition_by: Vec<rowid_ivm::plan::Expr>| Plan::Window {
        input: Box::new(keyed("x")),
        partition_by,
        columns: vec![
            out("k", "x.k"),
            out("n", "count(*) OVER (PARTITION BY x.v)"),
        ],
    };
    let text: String = [
        ("partitioned by x.v", windowed(vec![cond("x.v")])),
        ("one partition", windowed(vec![])),
    ]
    .iter()
    .map(|(what, plan)| {
        format!(
            "{what}:\n  {}\n",
            delta_statement(
                plan,
                "\"public\".\"st\"",
                IndexClass::DirectUnique,
                &[buffer("x")]
            )
            .unwrap()
        )
    })
    .collect();
    insta::assert_snapshot!(text);
}

/// A `WHERE` holding subqueries over `x`: `EXISTS` over `y`'s table.
fn semi_joined(input: Plan) -> Plan {
    Plan::SemiJoin {
        input: Box::new(input),
        predicate: cond("EXISTS (SELECT FROM public.y_t y WHERE y.a = x.k)"),
        reads: vec!["public.y_t".into()],
    }
}

#[test]
fn the_semi_join_rule_is_linear_until_a_table_its_subqueries_read_changes() {
    use rowid_ivm::delta::{delta_statement, immediate_statement};
    use rowid_registry::IndexClass;
    let plan = project(semi_joined(keyed("x")), &[("k", "x.k"), ("v", "x.v")]);
    // Its rows are its input's, identity and all.
    assert_eq!(identity(&plan), identity(&keyed("x")));
    let full = full_query(&plan).unwrap();
    assert!(
        full.ends_with("WHERE (EXISTS (SELECT FROM public.y_t y WHERE y.a = x.k))"),
        "{full}"
    );
    let differential = delta_statement(
        &plan,
        "\"public\".\"st\"",
        IndexClass::DirectUnique,
        &[buffer("x"), buffer("y")],
    )
    .unwrap();
    // The subquery's table has no buffer: nothing would tell its changes.
    assert_eq!(
        delta_statement(&plan, "st", IndexClass::DirectUnique, &[buffer("x")])
            .unwrap_err()
            .to_string(),
        "DIFFERENTIAL refresh of a source without a change buffer (public.y_t) is not built yet"
    );
    // IMMEDIATE: a statement on x is linear, one on y recomputes the level.
    let on = |relation: &str| {
        immediate_statement(
            &plan,
            "\"public\".\"st\"",
            IndexClass::DirectUnique,
            relation,
            &["k".into(), "v".into()],
            Some("__pgt_new"),
            Some("__pgt_old"),
        )
        .unwrap()
    };
    let (on_x, on_y) = (on("public.x_t"), on("public.y_t"));
    assert!(
        !on_x.contains("FROM \"public\".\"st\" AS s WHERE"),
        "{on_x}"
    );
    assert!(
        on_y.contains("-1 AS \"__pgt_w\" FROM \"public\".\"st\" AS s)"),
        "{on_y}"
    );
    assert!(!on_y.contains("FROM \"__pgt_new\" AS t"), "{on_y}");
    assert!(on_x.contains("FROM \"__pgt_new\" AS t"), "{on_x}");
    insta::assert_snapshot!(format!(
        "DIFFERENTIAL:\n  {differential}\nIMMEDIATE on x:\n  {on_x}\nIMMEDIATE on y:\n  {on_y}\n"
    ));
    // Anywhere else, no rule: named.
    let refusals = [
        (
            group_by_v(semi_joined(keyed("x")), "x"),
            "a SemiJoin (a subquery in WHERE) other than in the top level",
        ),
        (
            project(
                Plan::Subquery {
                    alias: "s".into(),
                    columns: vec!["k".into()],
                    input: Box::new(project(semi_joined(keyed("x")), &[("k", "x.k")])),
                },
                &[("k", "s.k")],
            ),
            "a SemiJoin (a subquery in WHERE) other than in the top level",
        ),
        (
            project(
                semi_joined(outer(OuterKind::Left, keyed("x"), keyed("z"), "x.k = z.k")),
                &[("k", "x.k")],
            ),
            "a LeftJoin other than a level's only FROM item",
        ),
        (
            project(
                semi_joined(Plan::Subquery {
                    alias: "x".into(),
                    columns: vec!["k".into()],
                    input: Box::new(project(keyed("z"), &[("k", "z.k")])),
                }),
                &[("k", "x.k")],
            ),
            "a SemiJoin (a subquery in WHERE) over a Subquery in FROM",
        ),
    ];
    for (plan, named) in refusals {
        let err = delta_statement(
            &plan,
            "st",
            IndexClass::DirectUnique,
            &[buffer("x"), buffer("y"), buffer("z")],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(named), "{err}");
    }
}
