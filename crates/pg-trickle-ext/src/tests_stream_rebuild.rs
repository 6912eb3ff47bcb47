// Rebuilds (issue 35, spec/stream-tables.md §7.3): `rebuild_stream_tables` replaces a graph
// whose rows record another identity version with what a fresh build of the same
// definitions holds, carrying its owner, privileges, comments, indexes, storage parameters,
// replica identity and publications; its preflight reports every stream table that cannot
// be rebuilt and changes nothing. Included into lib.rs's `tests` module after
// tests_stream_graph.rs (whose graph levels and helpers it uses).

/// The modes of the rebuilt graph's levels, in `GRAPH_LEVELS` order.
const REBUILT_MODES: [&str; 7] = [
    "DIFFERENTIAL",
    "IMMEDIATE",
    "FULL",
    "DIFFERENTIAL",
    "DIFFERENTIAL",
    "IMMEDIATE",
    "FULL",
];

/// What a rebuild must leave unchanged on `table`, read from the catalog: owner,
/// privileges on the table and its columns, comments, indexes (by definition), storage
/// parameters, replica identity and publication memberships (with column lists and row
/// filters).
fn rebuild_carried(table: &str) -> String {
    Spi::get_one::<String>(&format!(
        "SELECT concat_ws(' | ',
           pg_get_userbyid(c.relowner),
           (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(c.relacl) a),
           (SELECT string_agg(att.attname || '=' || a::text, ',' ORDER BY att.attname, a::text)
            FROM pg_attribute att, unnest(att.attacl) a WHERE att.attrelid = c.oid),
           obj_description(c.oid, 'pg_class'),
           (SELECT string_agg(att.attname || ':' || col_description(c.oid, att.attnum), ','
                              ORDER BY att.attnum)
            FROM pg_attribute att WHERE att.attrelid = c.oid AND att.attnum > 0
              AND col_description(c.oid, att.attnum) IS NOT NULL),
           (SELECT string_agg(pg_get_indexdef(i.indexrelid), ','
                              ORDER BY pg_get_indexdef(i.indexrelid))
            FROM pg_index i WHERE i.indrelid = c.oid),
           array_to_string(c.reloptions, ','),
           c.relreplident,
           (SELECT string_agg(p.pubname || coalesce(' ' || pr.prattrs::text, '')
                              || coalesce(' ' || pg_get_expr(pr.prqual, pr.prrelid), ''), ','
                              ORDER BY p.pubname)
            FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
            WHERE pr.prrelid = c.oid))
         FROM pg_class c WHERE c.oid = '{table}'::regclass"
    ))
    .expect("carried")
    .unwrap_or_default()
}

/// The versions every stream table records, in name order.
fn recorded_versions() -> String {
    Spi::get_one::<String>(
        "SELECT string_agg(pgt_name || '=' || row_identity_version || '/' || row_probe_version,
                           ' ' ORDER BY pgt_name)
         FROM pgtrickle.pgt_stream_tables",
    )
    .expect("versions")
    .unwrap_or_default()
}

/// The storage OIDs of the stream tables, in name order.
fn stream_oids() -> String {
    Spi::get_one::<String>(
        "SELECT string_agg(pgt_name || '=' || pgt_relid, ' ' ORDER BY pgt_name)
         FROM pgtrickle.pgt_stream_tables",
    )
    .expect("oids")
    .unwrap_or_default()
}

/// A graph of seven levels in mixed modes, owned by a role that is not a superuser, whose
/// rows record identity version 1 (as a graph an older library wrote would), rebuilt: every
/// level then equals a fresh build of the same definitions (identities included) and the
/// rows derived by hand, before and after more changes; what the tables carried is carried.
#[pg_test]
fn stream_rebuild_equals_a_fresh_build_and_carries_what_tables_had() {
    stream_sources();
    Spi::run(
        "CREATE ROLE rb_owner; CREATE ROLE rb_reader; CREATE ROLE rb_sub;
         GRANT CREATE ON SCHEMA public TO rb_owner;
         ALTER TABLE st_orders OWNER TO rb_owner;
         ALTER TABLE st_customers OWNER TO rb_owner;
         ALTER TABLE st_bag OWNER TO rb_owner;
         SET ROLE rb_owner;",
    )
    .expect("roles");
    for ((level, query, _), mode) in GRAPH_LEVELS.iter().zip(REBUILT_MODES) {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('rb_{level}', $q${}$q$, \
             refresh_mode => '{mode}', schedule => '1m')",
            query.replace("{p}", "rb")
        ))
        .unwrap_or_else(|e| panic!("rb_{level} ({mode}): {e}"));
    }
    // What the tables carry: privileges granted by the owner and by a grantee with the
    // grant option, one the owner revoked from itself, column privileges, comments, an
    // index, a storage parameter, a replica identity and a publication membership.
    Spi::run(
        "GRANT SELECT ON rb_top TO rb_reader WITH GRANT OPTION;
         REVOKE TRUNCATE ON rb_top FROM rb_owner;
         GRANT SELECT (customer, n) ON rb_agg TO rb_sub;
         COMMENT ON TABLE rb_agg IS 'per customer';
         COMMENT ON COLUMN rb_agg.s IS 'their amounts';
         CREATE INDEX rb_top_s ON rb_top (s DESC);
         ALTER TABLE rb_join SET (fillfactor = 70);
         ALTER TABLE rb_bag REPLICA IDENTITY FULL;
         SET ROLE rb_reader;
         GRANT SELECT (customer, s) ON rb_top TO rb_sub;
         RESET ROLE;
         CREATE PUBLICATION rb_pub FOR TABLE rb_agg (__pgt_row_id, customer, n) WHERE (n > 0)
           WITH (publish = 'insert');",
    )
    .expect("carried things");
    stream_changes();
    for (level, _, _) in GRAPH_LEVELS {
        Spi::run(&format!("SELECT pgtrickle.refresh_stream_table('rb_{level}')"))
            .unwrap_or_else(|e| panic!("refresh rb_{level}: {e}"));
    }
    let names: Vec<String> = GRAPH_LEVELS
        .iter()
        .map(|(level, _, _)| format!("rb_{level}"))
        .collect();
    let carried: Vec<String> = names.iter().map(|n| rebuild_carried(n)).collect();
    Spi::run(
        "INSERT INTO pgtrickle.pgt_refresh_history
         SELECT pgt_relid, pgt_name, now(), 1.5, 3, NULL FROM pgtrickle.pgt_stream_tables
         WHERE pgt_name = '\"public\".\"rb_top\"';",
    )
    .expect("history");
    // As an older library would have recorded them: every reader refuses them.
    Spi::run("UPDATE pgtrickle.pgt_stream_tables SET row_identity_version = 1").expect("v1");
    let err = error_of(None, "SELECT pgtrickle.refresh_stream_table('rb_join')").expect("v1");
    assert!(err.contains("row identity version 1"), "{err}");

    // A dry run reports the order and changes nothing.
    let oids = stream_oids();
    let planned = Spi::get_one::<String>(
        "SELECT string_agg(step || ':' || level || ':' || name || ':' || action, ' '
                           ORDER BY step)
         FROM pgtrickle.rebuild_stream_tables(dry_run => true)",
    )
    .expect("dry run");
    assert_eq!(
        planned.as_deref(),
        Some(
            "1:0:\"public\".\"rb_bag\":would rebuild 2:0:\"public\".\"rb_join\":would rebuild \
             3:1:\"public\".\"rb_agg\":would rebuild 4:1:\"public\".\"rb_bagf\":would rebuild \
             5:1:\"public\".\"rb_bagn\":would rebuild 6:2:\"public\".\"rb_named\":would rebuild \
             7:2:\"public\".\"rb_top\":would rebuild"
        )
    );
    assert_eq!(stream_oids(), oids, "a dry run changed nothing");
    assert!(recorded_versions().contains("=1/1"));

    // The rebuild.
    let rebuilt = Spi::get_one::<String>(
        "SELECT string_agg(name || ':' || action || ':' || detail, ' ' ORDER BY step)
         FROM pgtrickle.rebuild_stream_tables()",
    )
    .expect("rebuild")
    .unwrap_or_default();
    assert_eq!(rebuilt.matches(":rebuilt:row identity version 1").count(), 7, "{rebuilt}");
    assert_ne!(stream_oids(), oids, "new storage");
    assert!(!recorded_versions().contains("=1/"), "{}", recorded_versions());
    for (name, before) in names.iter().zip(&carried) {
        assert_eq!(&rebuild_carried(name), before, "{name} carried what it had");
    }
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT string_agg(pgt_name || ':' || coalesce(schedule, '-') || ':' || refresh_mode,
                               ' ' ORDER BY pgt_name)
             FROM pgtrickle.pgt_stream_tables WHERE pgt_name LIKE '%rb_b%'"
        )
        .expect("catalog")
        .as_deref(),
        Some(
            "\"public\".\"rb_bag\":1m:DIFFERENTIAL \"public\".\"rb_bagf\":1m:IMMEDIATE \
             \"public\".\"rb_bagn\":1m:FULL"
        )
    );
    assert_eq!(
        Spi::get_one::<i64>(
            "SELECT count(*) FROM pgtrickle.pgt_refresh_history WHERE pgt_relid = 'rb_top'::regclass"
        )
        .expect("history"),
        Some(1),
        "the history follows the new storage"
    );

    // A fresh build of the same definitions, in a schema of its own first on the path.
    Spi::run("CREATE SCHEMA rb_fresh; SET LOCAL search_path = rb_fresh, public;")
        .expect("schema");
    for ((level, query, _), mode) in GRAPH_LEVELS.iter().zip(REBUILT_MODES) {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('rb_fresh.rb_{level}', $q${}$q$, \
             refresh_mode => '{mode}')",
            query.replace("{p}", "rb")
        ))
        .unwrap_or_else(|e| panic!("fresh rb_{level}: {e}"));
    }
    Spi::run("RESET search_path").expect("path");
    let assert_fresh = |when: &str| {
        for ((level, _, expected), name) in GRAPH_LEVELS.iter().zip(&names) {
            assert_eq!(
                stream_difference(
                    &format!("SELECT * FROM public.{name}"),
                    &format!("SELECT * FROM rb_fresh.{name}")
                ),
                0,
                "{when}: {name} differs from a fresh build"
            );
            let columns = stream_columns(name);
            assert_eq!(
                stream_difference(&format!("SELECT __pgt_row_id, {columns} FROM {name}"), expected),
                0,
                "{when}: rb_{level} differs from the rows derived by hand"
            );
        }
    };
    assert_fresh("after the rebuild");
    // Maintained as before: more changes, both graphs refreshed.
    Spi::run(
        "UPDATE st_customers SET name = 'zed' WHERE cid = 1;
         INSERT INTO st_orders SELECT g, 'r', g / 4.0, g % 5, true FROM generate_series(20, 40) g;
         DELETE FROM st_orders WHERE customer = 2;
         INSERT INTO st_bag VALUES (9, 'n'), (NULL, NULL);",
    )
    .expect("changes");
    for schema in ["public", "rb_fresh"] {
        for (name, mode) in names.iter().zip(REBUILT_MODES) {
            if mode != "IMMEDIATE" {
                Spi::run(&format!(
                    "SELECT pgtrickle.refresh_stream_table('{schema}.{name}')"
                ))
                .unwrap_or_else(|e| panic!("refresh {schema}.{name}: {e}"));
            }
        }
    }
    assert_fresh("after more changes");
}

/// The preflight names every stream table that cannot be rebuilt, each with its cause: one
/// recorded by a newer library, one a view reads, one that reads that one, one whose key
/// a source DDL gave a type the encoder has no contract for (`money`), one
/// with row-level security, and one renamed. Refused, the rebuild changes nothing; with the
/// causes removed it rebuilds.
#[pg_test]
fn stream_rebuild_preflight_reports_every_cause_and_changes_nothing() {
    stream_sources();
    Spi::run(
        "CREATE TABLE rb_names (id int4 PRIMARY KEY, price numeric);
         INSERT INTO rb_names VALUES (1, 1.5), (2, 1.50), (3, 2);
         SELECT pgtrickle.create_stream_table('pf_ok', 'SELECT id, region FROM st_orders');
         SELECT pgtrickle.create_stream_table('pf_newer', 'SELECT cid FROM st_customers');
         SELECT pgtrickle.create_stream_table('pf_viewed',
           'SELECT customer, count(*) AS n FROM st_orders GROUP BY customer');
         SELECT pgtrickle.create_stream_table('pf_reader',
           'SELECT customer FROM pf_viewed WHERE n > 1');
         SELECT pgtrickle.create_stream_table('pf_names',
           'SELECT price, count(*) AS n FROM rb_names GROUP BY price');
         SELECT pgtrickle.create_stream_table('pf_secure', 'SELECT x, y FROM st_bag',
           refresh_mode => 'FULL');
         SELECT pgtrickle.create_stream_table('pf_moved', 'SELECT a, b FROM st_pairs');
         CREATE VIEW pf_view AS SELECT * FROM pf_viewed;
         CREATE POLICY pf_policy ON pf_secure USING (x > 0);
         ALTER TABLE pf_moved RENAME TO pf_moved_away;
         UPDATE pgtrickle.pgt_stream_tables SET row_identity_version = 3
         WHERE pgt_name = '\"public\".\"pf_newer\"';",
    )
    .expect("setup");
    // A type whose identity this encoder cannot represent (its text depends on a setting).
    Spi::run("ALTER TABLE rb_names ALTER COLUMN price TYPE money").expect("type DDL");
    let oids = stream_oids();
    let versions = recorded_versions();
    let report = Spi::get_one::<String>(
        "SELECT string_agg(name || ': ' || action || ': ' || detail, E'\\n' ORDER BY step)
         FROM pgtrickle.rebuild_stream_tables(dry_run => true)",
    )
    .expect("dry run")
    .unwrap_or_default();
    let line = |table: &str| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("\"public\".\"{table}\"")))
            .unwrap_or_else(|| panic!("{table} missing from {report}"))
            .to_string()
    };
    assert!(line("pf_ok").contains(": would rebuild: "), "{report}");
    assert!(
        line("pf_newer").contains(": refused: ") && line("pf_newer").contains("newer library"),
        "{report}"
    );
    assert!(
        line("pf_viewed").contains(": refused: ") && line("pf_viewed").contains("pf_view"),
        "{report}"
    );
    assert!(
        line("pf_reader").contains(": refused: it reads \"public\".\"pf_viewed\""),
        "{report}"
    );
    assert!(
        line("pf_names").contains(": refused: ") && line("pf_names").contains("money"),
        "{report}"
    );
    assert!(
        line("pf_secure").contains(": refused: ") && line("pf_secure").contains("row-level"),
        "{report}"
    );
    assert!(
        report.contains("pf_moved_away\": refused: it was created as \"public\".\"pf_moved\""),
        "{report}"
    );
    assert_eq!(stream_oids(), oids, "a dry run changed nothing");
    // Refused, naming each; nothing changed.
    let err = error_of(None, "SELECT * FROM pgtrickle.rebuild_stream_tables()").expect("refused");
    assert!(err.starts_with("55000: "), "{err}");
    assert!(err.contains("6 of 7 stream tables cannot be rebuilt"), "{err}");
    for table in ["pf_newer", "pf_viewed", "pf_reader", "pf_names", "pf_secure", "pf_moved"] {
        assert!(err.contains(table), "{table}: {err}");
    }
    assert_eq!(stream_oids(), oids);
    assert_eq!(recorded_versions(), versions);
    assert!(
        Spi::get_one::<bool>("SELECT to_regclass('pf_view') IS NOT NULL")
            .expect("view")
            .unwrap_or(false)
    );
    // The causes removed (the table a newer library wrote dropped, as that library's
    // rebuild would replace it), it rebuilds.
    Spi::run(
        "DROP VIEW pf_view;
         DROP POLICY pf_policy ON pf_secure;
         ALTER TABLE pf_moved_away RENAME TO pf_moved;
         ALTER TABLE rb_names ALTER COLUMN price TYPE numeric;
         DELETE FROM pgtrickle.pgt_stream_tables WHERE pgt_name = '\"public\".\"pf_newer\"';
         DROP TABLE pf_newer;",
    )
    .expect("causes removed");
    let rebuilt = Spi::get_one::<i64>(
        "SELECT count(*) FROM pgtrickle.rebuild_stream_tables() WHERE action = 'rebuilt'",
    )
    .expect("rebuild");
    assert_eq!(rebuilt, Some(6));
    assert_eq!(
        stream_difference(
            "SELECT price, n FROM pf_names",
            "SELECT price, count(*) FROM rb_names GROUP BY price"
        ),
        0
    );
}
