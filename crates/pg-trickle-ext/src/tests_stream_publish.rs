// Publishing stream tables (issue 35, spec/stream-tables.md §9): each storage's replica
// identity as the proposal's §11 requires, so that a publication carrying its updates and
// deletes never makes a refresh fail; `publish_stream_table` with every column,
// `__pgt_row_id` among them, and no probe. Included into lib.rs's `tests` module after
// tests_stream.rs (whose sources and helpers it uses). The subscriber's copy is proven on
// two clusters by `rowid-ivm/tests/publish.rs`.

/// (stream table, query, mode, its replica identity: `i` the unique index on
/// `__pgt_row_id`, `f` the whole row).
const PUBLISHED: &[(&str, &str, &str, &str)] = &[
    ("pi_keyed", "SELECT id, region, amount FROM st_orders", "DIFFERENTIAL", "i"),
    (
        "pi_text",
        "SELECT region, count(*) AS n, sum(amount) AS s FROM st_orders GROUP BY region",
        "DIFFERENTIAL",
        "f",
    ),
    ("pi_bag", "SELECT x, y FROM st_bag", "DIFFERENTIAL", "f"),
    ("pi_full", "SELECT x, y FROM st_bag WHERE x > 0", "FULL", "f"),
    (
        "pi_imm",
        "SELECT customer, count(*) AS n FROM st_orders GROUP BY customer",
        "IMMEDIATE",
        "i",
    ),
];

/// Refreshes every published stream table that is not IMMEDIATE and checks each equals its
/// query.
fn refresh_published(when: &str) {
    for (name, query, mode, _) in PUBLISHED {
        if *mode != "IMMEDIATE" {
            Spi::run(&format!("SELECT pgtrickle.refresh_stream_table('{name}')"))
                .unwrap_or_else(|e| panic!("{when}: refresh {name}: {e}"));
        }
        let columns = stream_columns(name);
        assert_eq!(
            stream_difference(&format!("SELECT {columns} FROM {name}"), query),
            0,
            "{when}: {name} differs from its query"
        );
    }
}

/// Stream tables of every index class in a publication that carries updates and deletes
/// (added by plain `CREATE PUBLICATION`): their refreshes and IMMEDIATE maintenance run,
/// because each storage has the replica identity its class requires (without it,
/// PostgreSQL refuses the refresh's UPDATE and DELETE). `publish_stream_table` adds a stream
/// table with every column, repairs a replica identity someone changed, replaces a column
/// list that left `__pgt_row_id` out, and refuses a caller who does not own it.
#[pg_test]
fn stream_published_tables_keep_refreshing_with_their_replica_identity() {
    stream_sources();
    for (name, query, mode, _) in PUBLISHED {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             refresh_mode => '{mode}')"
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, _, _, replident) in PUBLISHED {
        assert_eq!(
            Spi::get_one::<String>(&format!(
                "SELECT relreplident::text || coalesce(':' || (SELECT ic.relname::text
                   FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                   WHERE i.indrelid = c.oid AND i.indisreplident), '')
                 FROM pg_class c WHERE oid = '{name}'::regclass"
            ))
            .expect("replident")
            .as_deref(),
            Some(if *replident == "i" {
                format!("i:{name}_row_id")
            } else {
                "f".to_string()
            })
            .as_deref(),
            "{name}"
        );
    }
    Spi::run("CREATE PUBLICATION pi_plain FOR TABLE pi_keyed, pi_text, pi_bag, pi_full, pi_imm")
        .expect("publication");
    stream_changes();
    refresh_published("in a plain publication");

    // publish_stream_table: every column, __pgt_row_id among them; no probe anywhere.
    let attnames = |publication: &str, table: &str| {
        Spi::get_one::<String>(&format!(
            "SELECT array_to_string(attnames, ',') FROM pg_publication_tables
             WHERE pubname = '{publication}' AND tablename = '{table}'"
        ))
        .expect("attnames")
    };
    Spi::run(
        "SELECT pgtrickle.publish_stream_table('pi_keyed', 'pi_pub');
         SELECT pgtrickle.publish_stream_table('pi_text', 'pi_pub');",
    )
    .expect("publish");
    assert_eq!(
        attnames("pi_pub", "pi_keyed").as_deref(),
        Some("__pgt_row_id,id,region,amount")
    );
    let text_columns = attnames("pi_pub", "pi_text").unwrap_or_default();
    assert!(text_columns.starts_with("__pgt_row_id,region,n,s"), "{text_columns}");
    assert_eq!(
        Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_attribute a JOIN pgtrickle.pgt_stream_tables t
               ON t.pgt_relid = a.attrelid
             WHERE a.attnum > 0 AND (a.attgenerated <> '' OR a.attname LIKE '%probe%')"
        )
        .expect("probe"),
        Some(0),
        "no storage has a generated or probe column"
    );
    // A replica identity someone changed is set again; a column list without the identity
    // is replaced; publishing twice changes nothing.
    Spi::run(
        "ALTER TABLE pi_bag REPLICA IDENTITY DEFAULT;
         ALTER TABLE pi_keyed REPLICA IDENTITY DEFAULT;
         ALTER PUBLICATION pi_pub DROP TABLE pi_text;
         ALTER PUBLICATION pi_pub ADD TABLE pi_text (region, n);
         SELECT pgtrickle.publish_stream_table('pi_bag', 'pi_pub');
         SELECT pgtrickle.publish_stream_table('pi_keyed', 'pi_pub');
         SELECT pgtrickle.publish_stream_table('pi_keyed', 'pi_pub');
         SELECT pgtrickle.publish_stream_table('pi_text', 'pi_pub');",
    )
    .expect("publish again");
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT string_agg(relname || '=' || relreplident::text, ' ' ORDER BY relname)
             FROM pg_class WHERE relname IN ('pi_bag', 'pi_keyed')"
        )
        .expect("replident")
        .as_deref(),
        Some("pi_bag=f pi_keyed=i")
    );
    assert!(
        attnames("pi_pub", "pi_text")
            .unwrap_or_default()
            .starts_with("__pgt_row_id,region,n,s")
    );
    assert_eq!(
        Spi::get_one::<i64>("SELECT count(*) FROM pg_publication_tables WHERE pubname = 'pi_pub'")
            .expect("members"),
        Some(3)
    );
    // FOR ALL TABLES publishes it already, every column: its replica identity is checked.
    Spi::run(
        "ALTER TABLE pi_full REPLICA IDENTITY NOTHING;
         CREATE PUBLICATION pi_every FOR ALL TABLES;
         SELECT pgtrickle.publish_stream_table('pi_full', 'pi_every');",
    )
    .expect("every table");
    assert_eq!(
        Spi::get_one::<String>("SELECT relreplident::text FROM pg_class WHERE relname = 'pi_full'")
            .expect("replident")
            .as_deref(),
        Some("f")
    );
    // Published as they are, every stream table keeps refreshing.
    Spi::run(
        "INSERT INTO st_orders SELECT g, 'r' || (g % 3), g / 4.0, g % 5, g % 2 = 0
           FROM generate_series(20, 40) g;
         DELETE FROM st_orders WHERE customer = 2;
         UPDATE st_orders SET region = NULL WHERE id % 3 = 0;
         UPDATE st_bag SET x = x + 1 WHERE x > 1;
         INSERT INTO st_bag VALUES (5, 'v'), (5, 'v');",
    )
    .expect("more changes");
    refresh_published("published by publish_stream_table");
    Spi::run("CREATE ROLE pi_stranger").expect("role");
    let err = error_of(
        Some("pi_stranger"),
        "SELECT pgtrickle.publish_stream_table('public.pi_full', 'pi_theirs')",
    )
    .expect("a stranger published");
    assert!(err.contains("only the owner"), "{err}");
}

/// Identity schema messages format 8: a stream table's row says where its rows carry their
/// identity (`stored`, from the catalog), also under a `FOR ALL TABLES` publication that
/// carried the storage before its catalog row existed (its row is written again after it);
/// a plain table with a column named `__pgt_row_id` gets `"stored": null`.
#[pg_test]
fn stream_identity_messages_say_where_a_stream_table_stores_its_identity() {
    stream_sources();
    Spi::run(
        "SELECT pgtrickle.enable_identity_messages();
         CREATE PUBLICATION pm_every FOR ALL TABLES;
         CREATE TABLE pm_imitation (__pgt_row_id bytea PRIMARY KEY, v int);",
    )
    .expect("setup");
    for (name, query) in [
        ("pm_keyed", "SELECT id, region, amount FROM st_orders"),
        (
            "pm_text",
            "SELECT region, count(*) AS n FROM st_orders GROUP BY region",
        ),
        ("pm_bag", "SELECT x, y FROM st_bag"),
    ] {
        Spi::run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             refresh_mode => 'DIFFERENTIAL')"
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let stored = |table: &str| {
        Spi::get_one::<String>(&format!(
            "SELECT (schema::jsonb -> 'stored')::text FROM pgtrickle.identity_schemas
             WHERE relid = '{table}'::regclass"
        ))
        .expect("stored")
        .unwrap_or_else(|| panic!("{table} has no identity schema row"))
    };
    let bound = |table: &str| {
        Spi::get_one::<i32>(&format!(
            "SELECT max_identity_bytes FROM pgtrickle.pgt_stream_tables
             WHERE pgt_relid = '{table}'::regclass"
        ))
        .expect("bound")
        .expect("a bounded identity")
    };
    assert_eq!(
        stored("pm_keyed"),
        format!(
            r#"{{"column": "__pgt_row_id", "domain": "SCAN_KEY", "unique": true, "max_len": {}}}"#,
            bound("pm_keyed")
        )
    );
    assert_eq!(
        stored("pm_text"),
        r#"{"column": "__pgt_row_id", "domain": "GROUP_KEY", "unique": true, "max_len": null}"#
    );
    assert_eq!(
        stored("pm_bag"),
        r#"{"column": "__pgt_row_id", "domain": "KEYLESS_ROW", "unique": false, "max_len": null}"#
    );
    assert_eq!(stored("pm_imitation"), "null");
    // (jsonb prints keys by length, then bytes.)
    // The function a consumer reads at its slot's consistent point says the same.
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT (pgtrickle.identity_schema('pm_bag'::regclass)::jsonb -> 'stored' ->> 'domain')"
        )
        .expect("function")
        .as_deref(),
        Some("KEYLESS_ROW")
    );
}
