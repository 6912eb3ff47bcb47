//! The identity SQL of spec/stream-tables.md §3 run by PostgreSQL: for every operator, the
//! expression `identity_sql` renders is evaluated by the server's `encode_row_id_v2` over
//! real rows (keyed tables, a keyless table with duplicate and NULL rows, a NULL group), and
//! each result must equal the identity the rule gives the same row's values, encoded in Rust
//! by `rowid-codec` (tests/model). The SQL is the server's; the expected bytes are not the
//! code under test's SQL.
//!
//! Needs a server with the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::hex;
use rowid_ivm::identity::{Identity, branch_identity, identity, identity_sql};
use rowid_ivm::plan::{Plan, SetOpKind};
use rowid_testkit::psql::Psql;

mod model;
use model::{Row, encode, group_by_v, join, keyed, keyless, out};

/// Runs `SELECT encode(<identity>, 'hex'), <columns> FROM <from>` and checks every row's
/// identity against the model's encoding of the row's values (`columns` named as the rule's
/// expressions name them). Returns how many rows it checked.
fn agree(db: &Psql, what: &str, id: &Identity, columns: &[&str], from: &str) -> usize {
    let sql = format!(
        "SELECT encode({}, 'hex'), {} FROM {from};",
        identity_sql(id),
        columns
            .iter()
            .map(|c| format!("coalesce(({c})::text, 'NULL')"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let out = db
        .run(&sql)
        .unwrap_or_else(|e| panic!("{what}: {e}\n{sql}"));
    let mut n = 0;
    for line in out.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.split('|');
        let got = parts.next().unwrap();
        let row: Row = columns
            .iter()
            .zip(parts)
            // A side's presence (a boolean): there is any value, not there is none.
            .map(|(c, v)| match v {
                "true" => (c.to_string(), Some(1)),
                v => (c.to_string(), v.parse::<i64>().ok()),
            })
            .collect();
        let want = hex::encode(&encode(id, &row));
        assert_eq!(got, want, "{what}: the server's identity of {row:?}\n{sql}");
        n += 1;
    }
    assert!(n > 0, "{what}: no rows");
    n
}

#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn the_server_derives_every_rule_s_identity_as_the_rule_says() {
    let db = Psql::fresh_database("rowid_ivm_identity").unwrap();
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         CREATE TABLE x_t (k int8 PRIMARY KEY, v int8);
         CREATE TABLE y_t (k int8 PRIMARY KEY, v int8);
         CREATE TABLE z_t (a int8, b int8);
         INSERT INTO x_t VALUES (1, 10), (2, 10), (3, NULL), (4, 20), (-5, 30);
         INSERT INTO y_t VALUES (1, 10), (7, 20), (8, 20), (9, NULL);
         INSERT INTO z_t VALUES (10, 1), (10, 1), (NULL, NULL), (NULL, NULL), (20, 2);",
    )
    .unwrap();
    let mut checked = 0;
    checked += agree(
        &db,
        "scan, keyed",
        &identity(&keyed("x")),
        &["x.k"],
        "x_t x",
    );
    checked += agree(
        &db,
        "scan, keyless",
        &identity(&keyless("z")),
        &["z.a", "z.b"],
        "z_t z",
    );
    checked += agree(
        &db,
        "join of three",
        &identity(&join(vec![keyed("x"), keyed("y"), keyless("z")])),
        &["x.k", "y.k", "z.a", "z.b"],
        "x_t x, y_t y, z_t z WHERE x.v = y.v AND z.a = x.v",
    );
    checked += agree(
        &db,
        "group by, a NULL group among them",
        &identity(&group_by_v(keyed("x"), "x")),
        &["x.v"],
        "x_t x GROUP BY x.v",
    );
    let scalar = Plan::Aggregate {
        input: Box::new(keyed("x")),
        group_by: vec![],
        columns: vec![out("n", "count(*)")],
        calls: vec![],
    };
    checked += agree(
        &db,
        "aggregate without group by",
        &identity(&scalar),
        &["count(*)"],
        "x_t x WHERE false",
    );
    let distinct = Plan::Distinct {
        input: Box::new(Plan::Project {
            input: Box::new(keyed("x")),
            columns: vec![out("v", "x.v")],
        }),
    };
    checked += agree(
        &db,
        "distinct",
        &identity(&distinct),
        &["\"v\""],
        "(SELECT DISTINCT x.v AS \"v\" FROM x_t x) s",
    );
    let branches = [keyed("x"), keyless("z")];
    checked += agree(
        &db,
        "union all, branch 1",
        &branch_identity(&branches, 1).unwrap(),
        &["x.k"],
        "x_t x",
    );
    checked += agree(
        &db,
        "union all, branch 2",
        &branch_identity(&branches, 2).unwrap(),
        &["z.a", "z.b"],
        "z_t z",
    );
    let except_all = Plan::SetOp {
        op: SetOpKind::Except,
        all: true,
        branches: vec![keyless("z"), keyless("z")],
    };
    checked += agree(
        &db,
        "except all",
        &identity(&except_all),
        &["\"a\"", "\"b\""],
        "(SELECT z.a, z.b FROM z_t z EXCEPT ALL SELECT z.a, z.b FROM z_t z WHERE z.a = 20) s",
    );
    // A FULL join matching NULL to NULL (a FULL join needs a hashable condition): x.k = 3 (v NULL) matches both keyless rows of
    // NULLs, whose child is KEYLESS_ROW(NULL, NULL); x's unmatched rows have a NULL right
    // child, z's unmatched rows a NULL left child.
    let full = Plan::OuterJoin {
        kind: rowid_ivm::plan::OuterKind::Full,
        left: Box::new(keyed("x")),
        right: Box::new(keyless("z")),
        condition: model::cond("coalesce(z.a, -1) = coalesce(x.v, -1)"),
    };
    checked += agree(
        &db,
        "full join",
        &identity(&full),
        &[
            "x.k",
            "z.a",
            "z.b",
            "\"x\".ctid IS NOT NULL",
            "\"z\".ctid IS NOT NULL",
        ],
        "x_t x FULL JOIN z_t z ON coalesce(z.a, -1) = coalesce(x.v, -1)",
    );
    eprintln!("{checked} identities derived by the server as the rules say");
}
