// Stream tables over stream tables (issue 35, spec/stream-tables.md §7): graphs of three
// levels (a filter over an aggregate over a join, a join of an aggregate with a source, a
// keyless chain) in every mix of modes, each level equal to its query and to the identities
// derived by hand after every round of changes (IMMEDIATE-only graphs after every
// statement); a stored identity passed through byte for byte; the graph's refusals and
// cascade; schedules read and altered. Included into lib.rs's `tests` module after
// tests_stream.rs (whose sources and helpers it uses).

/// (level, query over the level below, the rows it must hold derived by hand from the
/// sources: the identity per spec §3 and §7, then the output columns). `{p}` is the
/// graph's prefix.
const GRAPH_LEVELS: &[(&str, &str, &str)] = &[
    (
        "join",
        "SELECT o.id, o.region, o.amount, o.customer, c.name
         FROM st_orders o JOIN st_customers c ON o.customer = c.cid",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(o.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(c.cid))::pgtrickle.row_id)),
                o.id, o.region, o.amount, o.customer, c.name
         FROM st_orders o, st_customers c WHERE o.customer = c.cid",
    ),
    (
        "agg",
        "SELECT customer, count(*) AS n, sum(amount) AS s, max(name) AS who
         FROM {p}_join GROUP BY customer",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(o.customer)),
                o.customer, count(*), sum(o.amount), max(c.name)
         FROM st_orders o, st_customers c WHERE o.customer = c.cid GROUP BY o.customer",
    ),
    (
        "top",
        "SELECT customer, s FROM {p}_agg WHERE n > 1",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(o.customer)), o.customer,
                sum(o.amount)
         FROM st_orders o, st_customers c WHERE o.customer = c.cid GROUP BY o.customer
         HAVING count(*) > 1",
    ),
    (
        "named",
        "SELECT a.customer, a.n, c.name FROM {p}_agg a JOIN st_customers c
           ON c.cid = a.customer",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g.customer))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(c.cid))::pgtrickle.row_id)),
                g.customer, g.n, c.name
         FROM (SELECT o.customer, count(*) AS n FROM st_orders o, st_customers c
               WHERE o.customer = c.cid GROUP BY o.customer) g, st_customers c
         WHERE c.cid = g.customer",
    ),
    (
        "bag",
        "SELECT x, y FROM st_bag WHERE x IS NOT NULL OR y IS NULL",
        "SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y)), x, y
         FROM st_bag WHERE x IS NOT NULL OR y IS NULL",
    ),
    (
        "bagf",
        "SELECT x FROM {p}_bag WHERE x > 1 OR x IS NULL",
        "SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y)), x
         FROM st_bag WHERE (x IS NOT NULL OR y IS NULL) AND (x > 1 OR x IS NULL)",
    ),
    (
        "bagn",
        "SELECT x, count(*) AS n FROM {p}_bag GROUP BY x",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(x)), x, count(*)
         FROM st_bag WHERE x IS NOT NULL OR y IS NULL GROUP BY x",
    ),
];

/// The graphs: a prefix and the mode of each level, in `GRAPH_LEVELS` order.
const GRAPHS: &[(&str, [&str; 7])] = &[
    ("gd", ["DIFFERENTIAL"; 7]),
    ("gi", ["IMMEDIATE"; 7]),
    (
        "gf",
        ["FULL", "DIFFERENTIAL", "DIFFERENTIAL", "FULL", "FULL", "DIFFERENTIAL", "DIFFERENTIAL"],
    ),
    (
        "gm",
        ["DIFFERENTIAL", "IMMEDIATE", "DIFFERENTIAL", "IMMEDIATE", "IMMEDIATE", "DIFFERENTIAL", "FULL"],
    ),
    (
        "gx",
        ["IMMEDIATE", "DIFFERENTIAL", "IMMEDIATE", "FULL", "DIFFERENTIAL", "IMMEDIATE", "IMMEDIATE"],
    ),
];

/// Creates every graph, level by level (each reads the one above it).
fn create_graphs() {
    for (prefix, modes) in GRAPHS {
        for ((level, query, _), mode) in GRAPH_LEVELS.iter().zip(modes) {
            Spi::run(&format!(
                "SELECT pgtrickle.create_stream_table('{prefix}_{level}', $q${}$q$, \
                 refresh_mode => '{mode}')",
                query.replace("{p}", prefix)
            ))
            .unwrap_or_else(|e| panic!("{prefix}_{level} ({mode}): {e}"));
        }
    }
}

/// Refreshes every stream table that is not IMMEDIATE, in dependency order.
fn refresh_graphs() {
    for (prefix, modes) in GRAPHS {
        for ((level, _, _), mode) in GRAPH_LEVELS.iter().zip(modes) {
            if *mode != "IMMEDIATE" {
                Spi::run(&format!(
                    "SELECT pgtrickle.refresh_stream_table('{prefix}_{level}')"
                ))
                .unwrap_or_else(|e| panic!("refresh {prefix}_{level}: {e}"));
            }
        }
    }
}

/// Each level of the graphs `prefixes` (their IMMEDIATE levels only, with `immediate_only`)
/// equals its query over the level below and the rows derived by hand from the sources
/// (identities included).
fn assert_graphs(prefixes: &[&str], when: &str, immediate_only: bool) {
    for (prefix, modes) in GRAPHS.iter().filter(|g| prefixes.contains(&g.0)) {
        for ((level, query, expected), mode) in GRAPH_LEVELS.iter().zip(modes) {
            if immediate_only && *mode != "IMMEDIATE" {
                continue;
            }
            let name = format!("{prefix}_{level}");
            let columns = stream_columns(&name);
            assert_eq!(
                stream_difference(
                    &format!("SELECT {columns} FROM {name}"),
                    &query.replace("{p}", prefix)
                ),
                0,
                "{when}: {name} differs from its query"
            );
            assert_eq!(
                stream_difference(&format!("SELECT __pgt_row_id, {columns} FROM {name}"), expected),
                0,
                "{when}: {name} differs from the rows derived by hand"
            );
        }
    }
}

/// The graphs over stream tables equal their queries and the spec's identities after the
/// first fill and after every round of changes refreshed in dependency order; the IMMEDIATE
/// levels of `gi` after every statement. A level that passes rows through keeps the
/// bytes its upstream stores.
#[pg_test]
fn stream_graph_levels_equal_their_queries_and_pass_identities_through() {
    stream_sources();
    create_graphs();
    let all: Vec<&str> = GRAPHS.iter().map(|g| g.0).collect();
    assert_graphs(&all, "after the first fill", false);
    let rounds: &[&[&str]] = &[
        &[
            "UPDATE st_orders SET id = 10 WHERE id = 1",
            "UPDATE st_orders SET region = 'south', amount = 2.000 WHERE id = 2",
            "DELETE FROM st_orders WHERE region = 'east'",
            "UPDATE st_customers SET cid = 4 WHERE cid = 3",
            "UPDATE st_orders SET customer = 4 WHERE customer = 3",
            "INSERT INTO st_orders VALUES (7, 'west', 1.50, 4, false), (8, NULL, 0.0, 1, true)",
            "DELETE FROM st_bag WHERE ctid = (SELECT min(ctid) FROM st_bag WHERE x = 1)",
            "INSERT INTO st_bag VALUES (3, 'z'), (4, 'w'), (NULL, NULL)",
        ],
        &[
            "UPDATE st_customers SET name = 'zed' WHERE cid = 1",
            "INSERT INTO st_orders SELECT g, 'r' || (g % 3), g / 4.0, g % 5, g % 2 = 0
             FROM generate_series(20, 60) g",
            // A customer whose orders are there: one statement changes st_customers and,
            // through gi_join, gi_agg, both of which gi_named reads.
            "INSERT INTO st_customers VALUES (0, 'nil')",
            "DELETE FROM st_orders WHERE customer = 2",
            "UPDATE st_bag SET x = x + 1 WHERE x > 1",
        ],
        &[
            "TRUNCATE st_bag",
            "INSERT INTO st_bag VALUES (5, 'v'), (5, 'v'), (NULL, 'n')",
            "DELETE FROM st_customers WHERE cid = 4",
            "UPDATE st_orders SET amount = amount * 2 WHERE id > 40",
        ],
    ];
    for (r, round) in rounds.iter().enumerate() {
        for (s, statement) in round.iter().enumerate() {
            Spi::run(statement).unwrap_or_else(|e| panic!("{statement}: {e}"));
            assert_graphs(&["gi"], &format!("round {r}, after statement {s}"), true);
        }
        refresh_graphs();
        assert_graphs(&all, &format!("after round {r}"), false);
    }
    // Passed through: the filter's rows carry the very bytes the aggregate stores.
    for prefix in &all {
        assert_eq!(
            Spi::get_one::<i64>(&format!(
                "SELECT count(*) FROM {prefix}_top t
                 LEFT JOIN {prefix}_agg a USING (__pgt_row_id)
                 WHERE a.customer IS DISTINCT FROM t.customer"
            ))
            .expect("count"),
            Some(0),
            "{prefix}_top keeps {prefix}_agg's identities"
        );
    }
}

/// An IMMEDIATE stream table reading a table both directly and through IMMEDIATE stream
/// tables over it (through a chain of two, in a join or in a subquery of its WHERE), or two
/// levels of one chain: one statement changes all it reads. Its triggers fire before its
/// upstreams' (their names rank by depth, spec §5.3), so it applies the statement before they
/// do, then recomputes from their writes; exact after every statement. With the triggers in
/// OID order (the upstream's first) the reader applied the statement twice: a duplicate
/// identity.
#[pg_test]
fn stream_graph_immediate_readers_of_a_table_and_its_upstreams() {
    stream_sources();
    let readers = [
        "SELECT o.id, i.n FROM st_orders o JOIN gr_imm i ON i.customer = o.customer",
        "SELECT o.id FROM st_orders o WHERE o.customer IN (SELECT customer FROM gr_imm2)",
        "SELECT i.customer, j.n FROM gr_imm i JOIN gr_imm2 j ON j.customer = i.customer",
    ];
    let mut tables = vec![
        (
            "gr_imm",
            "SELECT customer, count(*) AS n FROM st_orders GROUP BY customer",
        ),
        ("gr_imm2", "SELECT customer, n FROM gr_imm WHERE n > 1"),
    ];
    for (name, query) in &tables {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             refresh_mode => 'IMMEDIATE')"
        ))
        .expect("upstream");
    }
    let names = ["gr_r1", "gr_r2", "gr_r3"];
    for (name, query) in names.iter().zip(readers) {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             refresh_mode => 'IMMEDIATE')"
        ))
        .expect("reader");
        tables.push((name, query));
    }
    for statement in [
        "INSERT INTO st_orders VALUES (70, 'x', 1, 1, true), (71, 'x', 2, 9, true)",
        "INSERT INTO st_orders VALUES (72, 'x', 1, 9, true)",
        "UPDATE st_orders SET customer = 9 WHERE id IN (1, 3)",
        "DELETE FROM st_orders WHERE customer = 2",
        "UPDATE st_orders SET customer = NULL WHERE id = 72",
        "DELETE FROM st_orders WHERE id IN (70, 71)",
        "INSERT INTO st_orders SELECT g, 'y', g, g % 3, true FROM generate_series(80, 90) g",
    ] {
        Spi::run(statement).unwrap_or_else(|e| panic!("{statement}: {e}"));
        for (name, query) in &tables {
            let columns = stream_columns(name);
            assert_eq!(
                stream_difference(&format!("SELECT {columns} FROM {name}"), query),
                0,
                "after {statement}: {name} differs from its query"
            );
        }
    }
    // A trigger in the names of the builds before the depth ranked them is dropped with its
    // stream table, as the others are.
    let relid = Spi::get_one::<i64>("SELECT 'gr_r1'::regclass::oid::int8")
        .expect("oid")
        .expect("an oid");
    Spi::run(&format!(
        "CREATE TRIGGER pgtrickle_immediate_{relid}_i AFTER INSERT ON st_orders
           REFERENCING NEW TABLE AS __pgt_new FOR EACH STATEMENT
           EXECUTE FUNCTION pgtrickle.maintain_stream_table('{relid}');
         SELECT pgtrickle.drop_stream_table('gr_r1');"
    ))
    .expect("drop");
    assert_eq!(
        Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'st_orders'::regclass
               AND tgname LIKE 'pgtrickle\\_immediate\\_%{relid}\\__'"
        ))
        .expect("count"),
        Some(0),
        "gr_r1's triggers are gone"
    );
}

/// The graph stays a DAG whose readers trust what they read: a stream table others read is
/// not dropped or replaced without them (named, `dependent_objects_still_exist`), a query
/// reading its own table is refused, a stream table recording another identity version is
/// refused by its readers, a WAL-fed reader is refused, and `cascade` drops the readers first.
#[pg_test]
fn stream_graph_refusals_and_cascade() {
    stream_sources();
    for (level, query, _) in &GRAPH_LEVELS[..4] {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('gr_{level}', $q${}$q$)",
            query.replace("{p}", "gr")
        ))
        .expect("graph");
    }
    let refused = |sql: &str, wanted: &[&str]| {
        let err = error_of(None, sql).unwrap_or_else(|| panic!("{sql} was accepted"));
        for w in wanted {
            assert!(err.contains(w), "{sql}: {err} does not say {w:?}");
        }
    };
    refused(
        "SELECT pgtrickle.drop_stream_table('gr_agg')",
        &["2BP01", "gr_top", "gr_named", "read it"],
    );
    refused(
        "SELECT pgtrickle.alter_stream_table('gr_join', query => 'SELECT o.id FROM st_orders o')",
        &["2BP01", "cannot replace", "gr_agg"],
    );
    refused(
        "SELECT pgtrickle.alter_stream_table('gr_top', query => 'SELECT customer, s FROM gr_top')",
        &["42P17", "would read itself"],
    );
    refused(
        "SELECT pgtrickle.create_stream_table('gr_wal', 'SELECT customer FROM gr_agg', \
         cdc_mode => 'wal')",
        &["0A000", "gr_agg", "captured by trigger"],
    );
    // A source DDL under a stream table others read: its rebuild would replace what they
    // read, so its refresh is refused by name until they are dropped (issue 35's rebuilds).
    Spi::run("ALTER TABLE st_customers ADD COLUMN extra int4").expect("ddl");
    refused(
        "SELECT pgtrickle.refresh_stream_table('gr_join')",
        &["2BP01", "gr_agg"],
    );
    Spi::run("ALTER TABLE st_customers DROP COLUMN extra").expect("ddl");
    // Another identity version upstream: its readers refuse it, at create and at refresh.
    Spi::run(
        "UPDATE pgtrickle.pgt_stream_tables SET row_identity_version = 3
         WHERE pgt_relid = 'gr_agg'::regclass",
    )
    .expect("version");
    refused(
        "SELECT pgtrickle.refresh_stream_table('gr_top')",
        &["gr_agg", "version 3"],
    );
    refused(
        "SELECT pgtrickle.create_stream_table('gr_more', 'SELECT customer FROM gr_agg')",
        &["gr_agg", "version 3"],
    );
    Spi::run(
        "UPDATE pgtrickle.pgt_stream_tables SET row_identity_version = 2
         WHERE pgt_relid = 'gr_agg'::regclass",
    )
    .expect("version");
    // Nothing was dropped by the refusals.
    assert_eq!(
        Spi::get_one::<i64>("SELECT count(*) FROM pgtrickle.pgt_stream_tables").expect("n"),
        Some(4)
    );
    Spi::run("SELECT pgtrickle.drop_stream_table('gr_agg', cascade => true)").expect("cascade");
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT string_agg(pgt_relid::regclass::text, ',') FROM pgtrickle.pgt_stream_tables"
        )
        .expect("left"),
        Some("gr_join".to_string())
    );
    assert_eq!(
        Spi::get_one::<bool>(
            "SELECT to_regclass('gr_agg') IS NULL AND to_regclass('gr_top') IS NULL
                AND to_regclass('gr_named') IS NULL"
        )
        .expect("gone"),
        Some(true)
    );
    // What is left still refreshes: its capture of st_orders is its own.
    Spi::run("INSERT INTO st_orders VALUES (99, 'n', 1, 1, true)").expect("insert");
    Spi::run("SELECT pgtrickle.refresh_stream_table('gr_join')").expect("refresh");
    assert_eq!(
        Spi::get_one::<i64>("SELECT count(*) FROM gr_join WHERE id = 99").expect("n"),
        Some(1)
    );
}

/// A schedule is read at create (an interval, a cron expression, `calculated`), refused by
/// name when it is none of them or shorter than `pg_trickle.min_schedule_seconds`, and
/// changed alone by `alter_stream_table(..., schedule => ...)` without rebuilding the stream
/// table (`'none'`: by hand from now on). (The scheduler itself needs
/// `shared_preload_libraries`: crates/rowid-ivm/tests/scheduler.rs.)
#[pg_test]
fn stream_schedules_are_read_refused_and_altered() {
    stream_sources();
    for (name, schedule) in [("sc_a", "5m"), ("sc_b", "*/10 * * * *"), ("sc_c", "calculated")] {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', 'SELECT id FROM st_orders',
               schedule => '{schedule}')"
        ))
        .unwrap_or_else(|e| panic!("{schedule}: {e}"));
    }
    for (schedule, wanted) in [
        ("bogus", "is not an interval"),
        ("500ms", "is not an interval"),
        ("61 * * * *", "bad minute"),
        ("0s", "is not an interval"),
    ] {
        let err = error_of(
            None,
            &format!(
                "SELECT pgtrickle.create_stream_table('sc_x', 'SELECT id FROM st_orders',
                   schedule => '{schedule}')"
            ),
        )
        .unwrap_or_else(|| panic!("{schedule} was accepted"));
        assert!(err.contains("22023") && err.contains(wanted), "{schedule}: {err}");
    }
    Spi::run("SET pg_trickle.min_schedule_seconds = 60").expect("set");
    let err = error_of(
        None,
        "SELECT pgtrickle.create_stream_table('sc_x', 'SELECT id FROM st_orders',
           schedule => '30s')",
    )
    .expect("refused");
    assert!(err.contains("pg_trickle.min_schedule_seconds (60 s)"), "{err}");
    // A recorded schedule stays valid: a rebuild after a source DDL keeps it (a first
    // version checked it again there and failed the refresh).
    Spi::run("RESET pg_trickle.min_schedule_seconds").expect("reset");
    Spi::run(
        "SELECT pgtrickle.create_stream_table('sc_d', 'SELECT id FROM st_orders',
           schedule => '5s')",
    )
    .expect("create");
    Spi::run("SET pg_trickle.min_schedule_seconds = 60").expect("set");
    Spi::run("ALTER TABLE st_orders ADD COLUMN extra int4").expect("ddl");
    Spi::run("SELECT pgtrickle.refresh_stream_table('sc_d')").expect("the rebuild keeps 5s");
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT schedule FROM pgtrickle.pgt_stream_tables WHERE pgt_relid = 'sc_d'::regclass"
        )
        .expect("row"),
        Some("5s".to_string())
    );
    Spi::run("RESET pg_trickle.min_schedule_seconds").expect("reset");
    let relid = Spi::get_one::<pg_sys::Oid>("SELECT 'sc_a'::regclass::oid").expect("oid");
    Spi::run("SELECT pgtrickle.alter_stream_table('sc_a', schedule => '@hourly')").expect("alter");
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT schedule || ' ' || (pgt_relid = 'sc_a'::regclass)::text
             FROM pgtrickle.pgt_stream_tables WHERE pgt_relid = 'sc_a'::regclass"
        )
        .expect("row"),
        Some("@hourly true".to_string())
    );
    assert_eq!(
        Spi::get_one::<pg_sys::Oid>("SELECT 'sc_a'::regclass::oid").expect("oid"),
        relid,
        "the schedule alone rebuilds nothing"
    );
    Spi::run("SELECT pgtrickle.alter_stream_table('sc_a', schedule => 'none')").expect("alter");
    assert_eq!(
        Spi::get_one::<bool>(
            "SELECT schedule IS NULL FROM pgtrickle.pgt_stream_tables
             WHERE pgt_relid = 'sc_a'::regclass"
        )
        .expect("row"),
        Some(true)
    );
    let err = error_of(
        None,
        "SELECT pgtrickle.alter_stream_table('sc_a', schedule => 'often')",
    )
    .expect("refused");
    assert!(err.contains("\"often\""), "{err}");
}

/// `export_stream_tables` lists every definition with what it reads first, and that order
/// is enough to build the graph again: dropped (cascade) and created from the export in its
/// order, each stream table holds what it held.
#[pg_test]
fn stream_export_lists_definitions_in_dependency_order() {
    stream_sources();
    for (name, query, schedule) in [
        ("ex_zbase", "SELECT id, customer, amount FROM st_orders", "'calculated'"),
        ("ex_other", "SELECT cid, name FROM st_customers", "NULL"),
    ] {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', '{query}', schedule => {schedule})"
        ))
        .expect("create");
    }
    Spi::run(
        "SELECT pgtrickle.create_stream_table('ex_mid',
           'SELECT z.customer, count(*) AS n FROM ex_zbase z JOIN ex_other o
              ON o.cid = z.customer GROUP BY z.customer', schedule => 'calculated');
         SELECT pgtrickle.create_stream_table('ex_top',
           'SELECT customer, n FROM ex_mid WHERE n > 0', schedule => '1m');",
    )
    .expect("readers");
    let order = Spi::get_one::<String>(
        "SELECT string_agg(step || ':' || level || ':' || name || ':' ||
                           coalesce(schedule, '-'), ' ' ORDER BY step)
         FROM pgtrickle.export_stream_tables()",
    )
    .expect("export");
    assert_eq!(
        order.as_deref(),
        Some(
            "1:0:\"public\".\"ex_other\":- 2:0:\"public\".\"ex_zbase\":calculated \
             3:1:\"public\".\"ex_mid\":calculated 4:2:\"public\".\"ex_top\":1m"
        )
    );
    let before = Spi::get_one::<String>(
        "SELECT string_agg(customer || '=' || n, ',' ORDER BY customer) FROM ex_top",
    )
    .expect("rows");
    // Built again from the export, in its order.
    Spi::run(
        "CREATE TEMP TABLE ex_saved AS SELECT * FROM pgtrickle.export_stream_tables();
         SELECT pgtrickle.drop_stream_table('ex_zbase', cascade => true);
         SELECT pgtrickle.drop_stream_table('ex_other', cascade => true);
         DO $$ DECLARE d record; BEGIN
           FOR d IN SELECT * FROM ex_saved ORDER BY step LOOP
             PERFORM pgtrickle.create_stream_table(d.name, d.query, d.schedule,
                       d.refresh_mode, true, d.cdc_mode);
           END LOOP;
         END $$;",
    )
    .expect("rebuilt from the export");
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT string_agg(customer || '=' || n, ',' ORDER BY customer) FROM ex_top"
        )
        .expect("rows"),
        before
    );
    assert_eq!(
        Spi::get_one::<i64>("SELECT count(*) FROM pgtrickle.pgt_stream_tables").expect("n"),
        Some(4)
    );
}
