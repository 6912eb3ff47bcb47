//! Stream tables equal to their queries under the DML, DDL and isolation cases real
//! databases meet (spec/stream-tables.md §5, issue 48): one statement writing several
//! sources (data-modifying `WITH`, foreign-key cascades, user triggers). Each test builds
//! its case in a database of its own on the server of `cargo xtask test` and compares every
//! stream table with its own query, run by PostgreSQL, after every step.
//!
//! Needs a server with the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_testkit::psql::Psql;
use rowid_testkit::session::Session;

/// A fresh database with the extension.
fn database(name: &str) -> Psql {
    let db = Psql::fresh_database(name).unwrap();
    db.run("CREATE EXTENSION pg_trickle_ext;").unwrap();
    db
}

/// Runs `sql`, panicking with the statement and the server's message.
fn run(db: &Psql, sql: &str) {
    db.run(sql).unwrap_or_else(|e| panic!("{sql}\n{e}"));
}

/// Creates stream table `name` of `query` in `mode`.
fn create(db: &Psql, name: &str, query: &str, mode: &str) {
    run(
        db,
        &format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             refresh_mode => '{mode}');"
        ),
    );
}

/// Asserts that each of `tables` (name, query, columns) holds exactly its query's rows
/// after `when`, refreshing those that are not IMMEDIATE first.
fn assert_equal(db: &Psql, tables: &[(&str, &str, &str, &str)], when: &str) {
    for (name, query, columns, mode) in tables {
        if *mode != "IMMEDIATE" {
            run(
                db,
                &format!("SELECT pgtrickle.refresh_stream_table('{name}');"),
            );
        }
        let stored = format!("SELECT {columns} FROM {name}");
        let d = db.multiset_difference(&stored, query);
        assert_eq!(
            d,
            0,
            "{name} ({mode}) after {when}: stored\n{}\nquery\n{}",
            db.run(&format!("{stored} ORDER BY 1")).unwrap(),
            db.run(&format!("{query} ORDER BY 1")).unwrap()
        );
    }
}

/// The stream tables over `a JOIN b` the cases below keep: an aggregate and the plain join,
/// in each deferred and immediate mode.
fn join_tables(db: &Psql) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    const AGG: &str = "SELECT count(*) AS n, sum(b.v) AS s FROM a JOIN b ON b.a_id = a.id";
    const JOIN: &str = "SELECT a.id AS a_id, b.id AS b_id, b.v FROM a JOIN b ON b.a_id = a.id";
    let tables = vec![
        ("agg_i", AGG, "n, s", "IMMEDIATE"),
        ("join_i", JOIN, "a_id, b_id, v", "IMMEDIATE"),
        ("agg_d", AGG, "n, s", "DIFFERENTIAL"),
        ("join_d", JOIN, "a_id, b_id, v", "DIFFERENTIAL"),
    ];
    for (name, query, _, mode) in &tables {
        create(db, name, query, mode);
    }
    tables
}

/// Issue 48 item 1: `WITH x AS (INSERT INTO a ...) INSERT INTO b ...` changes both inputs
/// of the join in one statement (the aggregate stored `n = 2, s = 10`, the join failed the
/// statement with a duplicate identity), and so does a `WITH` that deletes from one and
/// updates the other.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn a_statement_writing_two_sources_through_with_is_applied_once() {
    let db = database("exact_with");
    run(
        &db,
        "CREATE TABLE a (id int PRIMARY KEY);
         CREATE TABLE b (id int PRIMARY KEY, a_id int, v int);
         INSERT INTO a VALUES (100); INSERT INTO b VALUES (100, 100, 1);",
    );
    let tables = join_tables(&db);
    for (when, sql) in [
        (
            "a WITH inserting into both",
            "WITH x AS (INSERT INTO a VALUES (1)) INSERT INTO b VALUES (1, 1, 5)",
        ),
        (
            "a WITH inserting into both, the other way",
            "WITH x AS (INSERT INTO b VALUES (2, 2, 7)) INSERT INTO a VALUES (2)",
        ),
        (
            "a WITH deleting from one and updating the other",
            "WITH x AS (DELETE FROM a WHERE id = 1) UPDATE b SET v = v + 1 WHERE a_id IN (1, 2)",
        ),
        (
            "a WITH reading what it inserted",
            "WITH x AS (INSERT INTO a VALUES (3) RETURNING id) \
             INSERT INTO b SELECT id, id, 3 FROM x",
        ),
    ] {
        run(&db, sql);
        assert_equal(&db, &tables, when);
    }
}

/// Issue 48 item 1: a foreign key's cascades write the second source inside the first's
/// statement (`ON DELETE CASCADE` left the cascaded parent's joined rows; `ON UPDATE
/// CASCADE` failed the user's UPDATE on a duplicate identity).
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn foreign_key_cascades_are_applied_once() {
    let db = database("exact_cascade");
    run(
        &db,
        "CREATE TABLE a (id int PRIMARY KEY);
         CREATE TABLE b (id int PRIMARY KEY,
                         a_id int REFERENCES a ON DELETE CASCADE ON UPDATE CASCADE, v int);
         INSERT INTO a SELECT g FROM generate_series(1, 5) g;
         INSERT INTO b SELECT g, 1 + g % 5, g FROM generate_series(1, 20) g;",
    );
    let tables = join_tables(&db);
    for (when, sql) in [
        ("a delete cascading", "DELETE FROM a WHERE id = 1"),
        ("an update cascading", "UPDATE a SET id = 10 WHERE id = 2"),
        (
            "an update of every parent cascading",
            "UPDATE a SET id = id + 100",
        ),
        ("a delete of every parent cascading", "DELETE FROM a"),
    ] {
        run(&db, sql);
        assert_equal(&db, &tables, when);
    }
}

/// Issue 48 item 1: a user's `AFTER ... FOR EACH ROW` trigger on one source writing the
/// other (the aggregate counted 2 where the query gives 1), and a `BEFORE` one.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn a_user_trigger_writing_another_source_is_applied_once() {
    let db = database("exact_trigger");
    run(
        &db,
        "CREATE TABLE a (id int PRIMARY KEY);
         CREATE TABLE b (id int PRIMARY KEY, a_id int, v int);
         CREATE FUNCTION a_writes_b() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO b VALUES (NEW.id, NEW.id, 5);
           RETURN NEW;
         END $$;
         CREATE FUNCTION b_writes_a() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO a VALUES (NEW.a_id) ON CONFLICT DO NOTHING;
           RETURN NEW;
         END $$;
         CREATE TRIGGER a_after AFTER INSERT ON a FOR EACH ROW EXECUTE FUNCTION a_writes_b();",
    );
    let tables = join_tables(&db);
    run(&db, "INSERT INTO a VALUES (1)");
    assert_equal(&db, &tables, "an AFTER ROW trigger on a inserting into b");
    run(&db, "INSERT INTO a SELECT g FROM generate_series(2, 30) g");
    assert_equal(&db, &tables, "29 rows, each trigger inserting into b");
    run(
        &db,
        "DROP TRIGGER a_after ON a;
         CREATE TRIGGER b_before BEFORE INSERT ON b FOR EACH ROW EXECUTE FUNCTION b_writes_a();",
    );
    run(&db, "INSERT INTO b VALUES (50, 50, 2), (51, 50, 3)");
    assert_equal(&db, &tables, "a BEFORE ROW trigger on b inserting into a");
}

/// Issue 48 item 2: a REPEATABLE READ (or SERIALIZABLE) writer whose snapshot predates
/// another session's committed write of one source writes the other: the join missed the
/// pair, without an error. Now its statement fails with a serialisation error (it may be
/// retried) and the stream table stays equal to its query; a writer whose snapshot sees the
/// other write is applied.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn a_writer_whose_snapshot_misses_a_maintained_write_fails() {
    let db = database("exact_rr");
    run(
        &db,
        "CREATE TABLE a (id int PRIMARY KEY);
         CREATE TABLE b (id int PRIMARY KEY, a_id int, v int);",
    );
    let tables = join_tables(&db);
    for (round, level) in ["REPEATABLE READ", "SERIALIZABLE"].iter().enumerate() {
        let id = round + 1;
        let mut writer = Session::open(&db, "exact_rr_writer");
        writer.send("\\set ON_ERROR_STOP 0");
        writer.run(&db, &format!("BEGIN ISOLATION LEVEL {level}; SELECT 1;"));
        run(&db, &format!("INSERT INTO a VALUES ({id})"));
        writer.run_may_fail(&db, &format!("INSERT INTO b VALUES ({id}, {id}, 5);"));
        writer.finish();
        let written = db
            .run(&format!("SELECT count(*) FROM b WHERE id = {id}"))
            .unwrap();
        assert_eq!(
            written.trim(),
            "0",
            "{level}: the writer's statement was applied though its snapshot cannot see a({id})"
        );
        assert_equal(&db, &tables, &format!("a {level} writer's insert"));
        // Retried, it sees the row and is applied.
        run(
            &db,
            &format!(
                "BEGIN ISOLATION LEVEL {level}; INSERT INTO b VALUES ({id}, {id}, 5); COMMIT;"
            ),
        );
        assert_equal(&db, &tables, &format!("the {level} writer retried"));
    }
}

/// Issue 48 item 3: `create_stream_table` in a REPEATABLE READ transaction filled under a
/// snapshot older than its capture (a row committed in between was never seen, in
/// DIFFERENTIAL and IMMEDIATE). Refused for those modes, by name; FULL, which captures
/// nothing, is created.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn create_under_a_snapshot_older_than_its_capture_is_refused() {
    let db = database("exact_create_rr");
    run(&db, "CREATE TABLE a (id int PRIMARY KEY, v int);");
    for mode in ["DIFFERENTIAL", "IMMEDIATE"] {
        let name = format!("st_{}", mode.to_lowercase());
        let mut creator = Session::open(&db, "exact_rr_creator");
        creator.send("\\set ON_ERROR_STOP 0");
        creator.run(&db, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;");
        run(
            &db,
            "INSERT INTO a SELECT coalesce(max(id), 0) + 1, 1 FROM a",
        );
        creator.run_may_fail(
            &db,
            &format!(
                "SELECT pgtrickle.create_stream_table('{name}', \
                 'SELECT id, v FROM a', refresh_mode => '{mode}');"
            ),
        );
        creator.finish();
        let exists = db
            .run(&format!("SELECT to_regclass('{name}') IS NOT NULL"))
            .unwrap();
        if exists.trim() == "t" {
            assert_equal(
                &db,
                &[(&name, "SELECT id, v FROM a", "id, v", mode)],
                "a create under REPEATABLE READ",
            );
            panic!("{mode}: created under a snapshot older than its capture");
        }
        let err = db
            .run(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ;
                 SELECT pgtrickle.create_stream_table('{name}', 'SELECT id, v FROM a',
                   refresh_mode => '{mode}');"
            ))
            .unwrap_err();
        assert!(
            err.contains(&name) && err.contains("READ COMMITTED"),
            "{mode}: {err}"
        );
    }
    run(
        &db,
        "BEGIN ISOLATION LEVEL REPEATABLE READ;
         SELECT pgtrickle.create_stream_table('st_full', 'SELECT id, v FROM a',
           refresh_mode => 'FULL');
         COMMIT;",
    );
}

/// The aliases and column names the delta statements give their own parts (`t`, `d`, `s`,
/// ... in `rowid_ivm::delta`), for the name fuzz below.
const GENERATED_NAMES: &[&str] = &[
    "t", "d", "n", "a", "f", "b", "x", "s", "u", "r", "q", "p", "o", "e", "c", "g", "k", "w", "lo",
    "hi", "mi", "ds", "dn", "dnn", "del", "bad", "k1", "g1", "a1", "a2", "v1", "h1",
];

/// Issue 48 items 13 and 14: a query whose `FROM` items are named like the parts of the
/// generated statements (a window's `PARTITION BY` over an item named `t` failed every
/// refresh, and every write with IMMEDIATE, `column t.q does not exist`), or whose sources
/// have columns named like them, is kept exactly by every rule: for every such name, as the
/// alias of one source and the name of a column, and another as the second source's alias,
/// a window, additive and recomputed aggregates, a join, an outer join, a semi-join,
/// `DISTINCT` and an aggregating subquery, DIFFERENTIAL and IMMEDIATE, through inserts,
/// updates and deletes of both sources.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn generated_names_never_collide_with_the_query_s() {
    let db = database("exact_names");
    for (i, name) in GENERATED_NAMES.iter().enumerate() {
        let other = GENERATED_NAMES[(i + 1) % GENERATED_NAMES.len()];
        let (src, oth) = (format!("src_{i}"), format!("oth_{i}"));
        run(
            &db,
            &format!(
                "CREATE TABLE {src} (id int PRIMARY KEY, grp int, val int, \"{name}\" int);
                 CREATE TABLE {oth} (id int PRIMARY KEY, grp int, \"{other}\" int);
                 INSERT INTO {src} SELECT n, n % 3, n * 7 % 11, n % 2 FROM generate_series(1, 12) n;
                 INSERT INTO {oth} SELECT n, n % 4, n FROM generate_series(1, 6) n;"
            ),
        );
        let (a, b, c) = (
            format!("\"{name}\""),
            format!("\"{other}\""),
            format!("\"{name}\""),
        );
        let queries = [
            (
                "win",
                format!(
                    "SELECT {a}.id, {a}.{c} AS pc, sum({a}.val) OVER (PARTITION BY {a}.{c}) AS w \
                     FROM {src} {a}"
                ),
                "id, pc, w",
            ),
            (
                "add",
                format!(
                    "SELECT {a}.{c} AS k, count(*) AS n, count({a}.val) AS nv, sum({a}.val) AS sv, \
                     min({a}.val) AS lo FROM {src} {a} GROUP BY {a}.{c}"
                ),
                "k, n, nv, sv, lo",
            ),
            (
                "rec",
                format!(
                    "SELECT {a}.grp, max({a}.val) AS m FROM {src} {a} GROUP BY {a}.grp \
                     HAVING count(*) > 1"
                ),
                "grp, m",
            ),
            (
                "join",
                format!(
                    "SELECT {a}.id, {b}.id AS oid, {b}.{b} AS ov FROM {src} {a} \
                     JOIN {oth} {b} ON {b}.grp = {a}.grp"
                ),
                "id, oid, ov",
            ),
            (
                "outer",
                format!(
                    "SELECT {a}.id, {b}.id AS oid FROM {src} {a} \
                     LEFT JOIN {oth} {b} ON {b}.grp = {a}.grp"
                ),
                "id, oid",
            ),
            (
                "semi",
                format!(
                    "SELECT {a}.id, {a}.{c} AS pc FROM {src} {a} \
                     WHERE {a}.grp IN (SELECT {b}.grp FROM {oth} {b} WHERE {b}.{b} > 2)"
                ),
                "id, pc",
            ),
            (
                "dist",
                format!("SELECT DISTINCT {a}.grp, {a}.{c} AS pc FROM {src} {a}"),
                "grp, pc",
            ),
            (
                "sub",
                format!(
                    "SELECT {b}.grp, {b}.n FROM (SELECT {a}.grp, count(*) AS n FROM {src} {a} \
                     GROUP BY {a}.grp) {b} WHERE {b}.n > 0"
                ),
                "grp, n",
            ),
        ];
        let mut tables = Vec::new();
        for (shape, query, columns) in &queries {
            for mode in ["DIFFERENTIAL", "IMMEDIATE"] {
                let st = format!("{shape}_{}_{i}", &mode[..1].to_lowercase());
                db.run(&format!(
                    "SELECT pgtrickle.create_stream_table('{st}', $q${query}$q$, \
                     refresh_mode => '{mode}');"
                ))
                .unwrap_or_else(|e| panic!("{shape} ({mode}) with {name:?} and {other:?}: {e}"));
                tables.push((st, query.clone(), columns.to_string(), mode));
            }
        }
        for (when, sql) in [
            (
                "inserts",
                format!(
                    "INSERT INTO {src} SELECT n, n % 5, n, n % 3 FROM generate_series(13, 20) n;
                     INSERT INTO {oth} VALUES (7, 1, 9), (8, 4, 1);"
                ),
            ),
            (
                "updates",
                format!(
                    "UPDATE {src} SET \"{name}\" = \"{name}\" + 1, val = val - 2 WHERE id % 3 = 0;
                     UPDATE {oth} SET grp = grp + 1 WHERE id % 2 = 0;"
                ),
            ),
            (
                "deletes",
                format!("DELETE FROM {src} WHERE id % 4 = 1; DELETE FROM {oth} WHERE id = 3;"),
            ),
        ] {
            db.run(&sql)
                .unwrap_or_else(|e| panic!("{when} with {name:?} and {other:?}: {e}"));
            let refs: Vec<(&str, &str, &str, &str)> = tables
                .iter()
                .map(|(st, q, c, m)| (st.as_str(), q.as_str(), c.as_str(), *m))
                .collect();
            assert_equal(&db, &refs, &format!("{when} with {name:?} and {other:?}"));
        }
        // Each name's tables dropped: the next name's writes maintain only its own.
        for (st, _, _, _) in &tables {
            run(&db, &format!("SELECT pgtrickle.drop_stream_table('{st}');"));
        }
    }
}

/// Issue 48 item 5: `count(x)` of a composite value with NULL fields counts it (the
/// additive rule filtered `x IS NOT NULL`, false for such a value: it counted 1 where
/// `count` gives 3).
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn count_of_a_composite_with_null_fields_counts_it() {
    let db = database("exact_count_composite");
    run(
        &db,
        "CREATE TYPE pair AS (x int, y int);
         CREATE TABLE c (id int PRIMARY KEY, g int, p pair);",
    );
    let query = "SELECT g, count(p) AS n, count(*) AS m FROM c GROUP BY g";
    let total = "SELECT count(p) AS n, count(*) AS m FROM c";
    for (name, q, mode) in [
        ("cnt_d", query, "DIFFERENTIAL"),
        ("cnt_i", query, "IMMEDIATE"),
        ("tot_d", total, "DIFFERENTIAL"),
        ("tot_i", total, "IMMEDIATE"),
    ] {
        create(&db, name, q, mode);
    }
    let tables = [
        ("cnt_d", query, "g, n, m", "DIFFERENTIAL"),
        ("cnt_i", query, "g, n, m", "IMMEDIATE"),
        ("tot_d", total, "n, m", "DIFFERENTIAL"),
        ("tot_i", total, "n, m", "IMMEDIATE"),
    ];
    run(
        &db,
        "INSERT INTO c VALUES (1, 1, ROW(1, NULL)), (2, 1, ROW(NULL, NULL)), (3, 1, ROW(1, 2)),
                              (4, 1, NULL), (5, 2, ROW(NULL, 3))",
    );
    assert_equal(&db, &tables, "inserting values with NULL fields");
    run(&db, "DELETE FROM c WHERE id IN (2, 4)");
    assert_equal(&db, &tables, "deleting one with NULL fields and a NULL");
    run(&db, "UPDATE c SET p = ROW(NULL, NULL) WHERE id = 3");
    assert_equal(&db, &tables, "updating one to all NULL fields");
}

/// Issue 48 item 14: a source column named like the delta statements' own columns
/// (`__pgt_w`): DIFFERENTIAL and IMMEDIATE were accepted and every write (IMMEDIATE) or
/// refresh failed, the column ambiguous. Refused at create by name; FULL keeps it.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn a_source_column_of_an_internal_name_is_refused_by_name() {
    let db = database("exact_internal_names");
    run(
        &db,
        "CREATE TABLE s (id int PRIMARY KEY, g int, \"__pgt_w\" int);
         INSERT INTO s VALUES (1, 1, 1);",
    );
    for mode in ["DIFFERENTIAL", "IMMEDIATE"] {
        let err = db
            .run(&format!(
                "SELECT pgtrickle.create_stream_table('st_{mode}', \
                 'SELECT g, count(*) AS n FROM s GROUP BY g', refresh_mode => '{mode}');"
            ))
            .err()
            .unwrap_or_else(|| {
                let _ = db.run("INSERT INTO s VALUES (2, 1, 2)");
                panic!("{mode}: accepted a source column named __pgt_w")
            });
        assert!(
            err.contains("__pgt_w") && err.contains("public.s") && err.contains(mode),
            "{mode}: {err}"
        );
    }
    create(&db, "st_full", "SELECT g, \"__pgt_w\" AS w FROM s", "FULL");
    run(&db, "INSERT INTO s VALUES (2, 1, 2)");
    assert_equal(
        &db,
        &[(
            "st_full",
            "SELECT g, \"__pgt_w\" AS w FROM s",
            "g, w",
            "FULL",
        )],
        "an insert",
    );
}

/// Issue 48 items 15 and 20: queries accepted for DIFFERENTIAL or IMMEDIATE whose refresh
/// then failed, or whose source's writes all failed (a `STORED` generated column, which
/// change buffers omit; a query reading no table; no output columns; a system column), are
/// refused at create by name; FULL keeps them, and IMMEDIATE keeps the generated column.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn queries_no_delta_statement_can_keep_are_refused_by_name() {
    let db = database("exact_unmaintainable");
    run(
        &db,
        "CREATE TABLE s (id int PRIMARY KEY, g int, d int GENERATED ALWAYS AS (g * 2) STORED);
         INSERT INTO s VALUES (1, 1);
         CREATE FUNCTION f() RETURNS SETOF int LANGUAGE sql IMMUTABLE AS 'SELECT 1';",
    );
    for (query, modes, reason) in [
        (
            "SELECT id, d FROM s",
            &["DIFFERENTIAL"][..],
            "generated column",
        ),
        ("SELECT s FROM s", &["DIFFERENTIAL"][..], "generated column"),
        (
            "SELECT * FROM f()",
            &["DIFFERENTIAL", "IMMEDIATE"][..],
            "reads no table",
        ),
        (
            "SELECT * FROM generate_series(1, 3) AS n",
            &["DIFFERENTIAL", "IMMEDIATE"][..],
            "reads no table",
        ),
        (
            "SELECT FROM s",
            &["DIFFERENTIAL", "IMMEDIATE"][..],
            "no output columns",
        ),
        (
            "SELECT id, xmin AS x FROM s",
            &["DIFFERENTIAL", "IMMEDIATE"][..],
            "system column",
        ),
        (
            "SELECT id, ctid AS c FROM s",
            &["DIFFERENTIAL", "IMMEDIATE"][..],
            "system column",
        ),
    ] {
        for mode in modes {
            match db.run(&format!(
                "SELECT pgtrickle.create_stream_table('st_refused', $q${query}$q$, \
                 refresh_mode => '{mode}');"
            )) {
                Ok(_) => panic!("{query} ({mode}): accepted"),
                Err(e) => assert!(
                    e.contains("st_refused") && e.contains(reason) && e.contains(mode),
                    "{query} ({mode}): {e}"
                ),
            }
        }
    }
    create(&db, "gen_i", "SELECT id, d FROM s", "IMMEDIATE");
    create(&db, "gen_f", "SELECT id, d FROM s", "FULL");
    create(&db, "none_f", "SELECT FROM s", "FULL");
    create(&db, "func_f", "SELECT * FROM f()", "FULL");
    run(
        &db,
        "INSERT INTO s VALUES (2, 2); UPDATE s SET g = 5 WHERE id = 1;",
    );
    assert_equal(
        &db,
        &[
            ("gen_i", "SELECT id, d FROM s", "id, d", "IMMEDIATE"),
            ("gen_f", "SELECT id, d FROM s", "id, d", "FULL"),
            ("none_f", "SELECT FROM s", "", "FULL"),
            ("func_f", "SELECT * FROM f()", "f", "FULL"),
        ],
        "writes of the source",
    );
}

/// Refreshes every stream table of `tables`, IMMEDIATE ones included (which rebuilds those
/// a DDL changed).
fn refresh_all(db: &Psql, tables: &[(&str, &str, &str, &str)]) {
    for (name, ..) in tables {
        run(
            db,
            &format!("SELECT pgtrickle.refresh_stream_table('{name}');"),
        );
    }
}

/// Asserts that every stored identity of the group stream table `name` is the one
/// `encode_row_id_v2` gives its group key `key` now.
fn assert_group_identities(db: &Psql, name: &str, key: &str, when: &str) {
    let wrong = db
        .run(&format!(
            "SELECT count(*) FROM {name} \
             WHERE __pgt_row_id <> pgtrickle.encode_row_id_v2('GROUP_KEY', ROW({key}))"
        ))
        .unwrap();
    assert_eq!(
        wrong.trim(),
        "0",
        "{name} after {when}: identities not the encoder's"
    );
}

/// Issue 48 items 6, 7 and 16: DDL on what a column's type is made of, or on a column's
/// collation or `NOT NULL`, changes what a stream table holds without changing the column's
/// type: an enum label renamed under a domain (two groups of one label, identities no
/// longer the encoder's), an attribute added to a composite group key (duplicate groups),
/// a collation changed under `min`/`max` (the old order kept), `NOT NULL` dropped from the
/// unique key (refreshes failed on a duplicate identity). The shape covers them: the next
/// refresh rebuilds.
#[test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
fn ddl_on_nested_types_collations_and_not_null_rebuilds() {
    let db = database("exact_nested_ddl");
    run(
        &db,
        "CREATE TYPE mood AS ENUM ('sad', 'ok');
         CREATE DOMAIN dmood AS mood;
         CREATE TABLE e (id int PRIMARY KEY, m dmood, v int);
         INSERT INTO e VALUES (1, 'sad', 1), (2, 'ok', 2);
         CREATE TYPE pt AS (x int);
         CREATE TABLE cp (id int PRIMARY KEY, p pt);
         INSERT INTO cp VALUES (1, ROW(1)), (2, ROW(1)), (3, ROW(2));
         CREATE TABLE co (id int PRIMARY KEY, g int, t text COLLATE \"C\");
         INSERT INTO co VALUES (1, 1, 'a'), (2, 1, 'B');
         CREATE TABLE nn (k int NOT NULL, v int);
         CREATE UNIQUE INDEX ON nn (k);
         INSERT INTO nn VALUES (1, 1), (2, 2);",
    );
    let enum_q = "SELECT m, count(*) AS n, sum(v) AS s FROM e GROUP BY m";
    let comp_q = "SELECT p, count(*) AS n FROM cp GROUP BY p";
    let coll_q = "SELECT g, min(t) AS lo, max(t) AS hi FROM co GROUP BY g";
    let nn_q = "SELECT k, v FROM nn";
    let mut tables = Vec::new();
    for mode in ["DIFFERENTIAL", "IMMEDIATE"] {
        let m = &mode[..1].to_lowercase();
        for (base, q, cols) in [
            ("en", enum_q, "m, n, s"),
            ("cp", comp_q, "p, n"),
            ("co", coll_q, "g, lo, hi"),
        ] {
            let name: &'static str = Box::leak(format!("{base}_{m}").into_boxed_str());
            create(&db, name, q, mode);
            tables.push((name, q, cols, mode));
        }
    }
    // A unique key without a size bound cannot be IMMEDIATE's; the key is an int here.
    for mode in ["DIFFERENTIAL", "IMMEDIATE"] {
        let name: &'static str =
            Box::leak(format!("nn_{}", &mode[..1].to_lowercase()).into_boxed_str());
        create(&db, name, nn_q, mode);
        tables.push((name, nn_q, "k, v", mode));
    }
    assert_equal(&db, &tables, "create");
    let icu = db
        .run("SELECT count(*) FROM pg_collation WHERE collname = 'und-x-icu'")
        .unwrap();
    let collation = if icu.trim() == "1" {
        "\"und-x-icu\""
    } else {
        "\"POSIX\""
    };
    run(
        &db,
        &format!(
            "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine';
             ALTER TYPE pt ADD ATTRIBUTE y int;
             ALTER TABLE co ALTER COLUMN t TYPE text COLLATE {collation};
             ALTER TABLE nn ALTER COLUMN k DROP NOT NULL;"
        ),
    );
    refresh_all(&db, &tables);
    run(
        &db,
        "INSERT INTO e VALUES (3, 'fine', 3);
         INSERT INTO cp VALUES (4, ROW(1, NULL)), (5, ROW(1, 7));
         INSERT INTO co VALUES (3, 1, 'c'), (4, 2, 'D');
         INSERT INTO nn VALUES (NULL, 3), (NULL, 4);",
    );
    assert_equal(
        &db,
        &tables,
        "DDL on nested types, a collation and NOT NULL",
    );
    for name in ["en_d", "en_i"] {
        assert_group_identities(&db, name, "m", "the enum label's rename");
    }
    for name in ["cp_d", "cp_i"] {
        assert_group_identities(&db, name, "p", "the attribute's addition");
    }
}
