//! Publishing stream tables (spec/stream-tables.md §9, proposal §11) to a PostgreSQL
//! subscriber: two clusters of the test's own, the publisher with the extension, the
//! subscriber without it (`__pgt_row_id` is a plain `bytea` column there). Stream tables of
//! every index class and refresh mode, keyed (replica identity: the unique index on
//! `__pgt_row_id`) and keyless or unbounded (`FULL`), are added with
//! `publish_stream_table`; through a seeded workload of writes and refreshes the
//! subscriber's copy of each equals the stream table, row for row, identities included.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use rowid_testkit::cluster::Cluster;
use rowid_testkit::psql::Psql;

/// (stream table, query, mode, replica identity: `i` its unique index, `f` the whole row).
const PUBLISHED: &[(&str, &str, &str, &str)] = &[
    (
        "p_join",
        "SELECT o.id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.cust",
        "DIFFERENTIAL",
        "i",
    ),
    (
        "p_agg",
        "SELECT region, count(*) AS n, sum(amount) AS total FROM p_join GROUP BY region",
        "IMMEDIATE",
        "i",
    ),
    (
        "p_notes",
        "SELECT note, count(*) AS n FROM orders GROUP BY note",
        "DIFFERENTIAL",
        "f",
    ),
    (
        "p_bag",
        "SELECT cust, note FROM events",
        "DIFFERENTIAL",
        "f",
    ),
    (
        "p_full",
        "SELECT cust, max(amount) AS top FROM orders GROUP BY cust",
        "FULL",
        "i",
    ),
];

/// The rows of `table` on `db`, as one digest.
fn digest(db: &Psql, table: &str) -> String {
    db.run(&format!(
        "SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '')
         FROM public.{table} t"
    ))
    .unwrap()
    .trim()
    .to_string()
}

/// Waits until the subscriber's copy of every published table equals the stream table.
fn replicated(publisher: &Psql, subscriber: &Psql, when: &str) {
    let started = Instant::now();
    loop {
        let differing: Vec<&str> = PUBLISHED
            .iter()
            .map(|p| p.0)
            .filter(|t| digest(publisher, t) != digest(subscriber, t))
            .collect();
        if differing.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{when}: the subscriber's copy of {differing:?} never equals the stream table"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One round of writes.
fn writes(db: &Psql, round: u64) {
    let n = |k: u64| (round * 7919 + k * 104_729) % 97;
    db.run(&format!(
        "INSERT INTO orders SELECT g, g % 6, g * 0.5, 'note ' || (g % 4)
           FROM generate_series({0}, {0} + 4) g ON CONFLICT (id) DO NOTHING;
         UPDATE orders SET amount = amount + 1, note = 'moved {1}' WHERE id % 9 = {2};
         DELETE FROM orders WHERE id % 13 = {3};
         UPDATE customers SET region = (ARRAY['north', 'south', 'west', NULL])[{4} % 4 + 1]
           WHERE id = {4} % 6;
         INSERT INTO orders VALUES ({5}, 1, 1, NULL), ({6}, 1, 1, NULL)
           ON CONFLICT (id) DO NOTHING;
         INSERT INTO events VALUES ({4} % 3, 'e' || {4} % 2), ({4} % 3, 'e' || {4} % 2);
         DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE cust = {2} % 3);
         UPDATE events SET note = NULL
           WHERE ctid = (SELECT max(ctid) FROM events WHERE cust = {3} % 3);",
        1000 + round * 10,
        round,
        n(1) % 9,
        n(2) % 13,
        n(3),
        2000 + round * 2,
        2001 + round * 2,
    ))
    .unwrap();
    for (name, _, mode, _) in PUBLISHED {
        if *mode != "IMMEDIATE" {
            db.run(&format!("SELECT pgtrickle.refresh_stream_table('{name}')"))
                .unwrap();
        }
    }
}

#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn a_subscriber_keeps_an_exact_copy_of_published_stream_tables() {
    let bindir = rowid_testkit::cluster::server_bindir();
    let pid = std::process::id();
    let base = std::env::temp_dir().join(format!("rowid-ivm-publish-{pid}"));
    let port = 59_000 + (pid % 500) as u16;
    let publisher = Cluster::start(&bindir, &base.join("publisher"), port).unwrap();
    let subscriber = Cluster::start(&bindir, &base.join("subscriber"), port + 500).unwrap();
    let (src, dst) = (publisher.psql(), subscriber.psql());
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         CREATE TABLE customers (id int8 PRIMARY KEY, region varchar(10));
         CREATE TABLE orders (id int8 PRIMARY KEY, cust int8, amount numeric, note text);
         INSERT INTO customers SELECT g, (ARRAY['north', 'south', 'west'])[g % 3 + 1]
           FROM generate_series(0, 5) g;
         INSERT INTO orders SELECT g, g % 6, g * 1.5, 'note ' || (g % 5)
           FROM generate_series(1, 40) g;
         CREATE TABLE events (cust int8, note text);
         INSERT INTO events VALUES (1, 'a'), (1, 'a'), (2, NULL), (2, NULL), (3, 'c');",
    )
    .unwrap();
    for (name, query, mode, _) in PUBLISHED {
        src.run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             refresh_mode => '{mode}');
             SELECT pgtrickle.publish_stream_table('{name}', 'stream_pub');"
        ))
        .unwrap();
    }
    // What the proposal's §11 requires of each: its replica identity, a column list with
    // __pgt_row_id, no probe.
    for (name, _, _, replident) in PUBLISHED {
        assert_eq!(
            src.run(&format!(
                "SELECT relreplident FROM pg_class WHERE oid = '{name}'::regclass"
            ))
            .unwrap()
            .trim(),
            *replident,
            "{name}"
        );
        let published = src
            .run(&format!(
                "SELECT array_to_string(attnames, ',') FROM pg_publication_tables
                 WHERE pubname = 'stream_pub' AND tablename = '{name}'"
            ))
            .unwrap();
        assert!(
            published.starts_with("__pgt_row_id,"),
            "{name}: {published}"
        );
        assert!(!published.contains("probe"), "{name}: {published}");
    }
    // The subscriber's tables: the stream tables' columns (plain types, no extension), the
    // keyed ones with a unique index on __pgt_row_id as their replica identity.
    for (name, _, _, replident) in PUBLISHED {
        let columns = src
            .run(&format!(
                "SELECT string_agg(format('%I %s', attname, format_type(atttypid, atttypmod))
                                   || CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END,
                                   ', ' ORDER BY attnum)
                 FROM pg_attribute WHERE attrelid = '{name}'::regclass AND attnum > 0
                   AND NOT attisdropped"
            ))
            .unwrap();
        let identity = if *replident == "i" {
            format!(
                "CREATE UNIQUE INDEX {name}_id ON {name} (__pgt_row_id);
                 ALTER TABLE {name} REPLICA IDENTITY USING INDEX {name}_id;"
            )
        } else {
            format!("ALTER TABLE {name} REPLICA IDENTITY FULL;")
        };
        dst.run(&format!(
            "CREATE TABLE {name} ({}); {identity}",
            columns.trim()
        ))
        .unwrap();
    }
    assert_eq!(
        dst.run("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trickle_ext'")
            .unwrap()
            .trim(),
        "0"
    );
    dst.run(&format!(
        "CREATE SUBSCRIPTION stream_sub CONNECTION '{}' PUBLICATION stream_pub",
        publisher.dsn("postgres")
    ))
    .unwrap();
    replicated(&src, &dst, "after the initial copy");
    for round in 0..12 {
        writes(&src, round);
        replicated(&src, &dst, &format!("after round {round}"));
    }
    // Keyless duplicates and unbounded keys were among what crossed.
    assert_ne!(
        dst.run("SELECT count(*) - count(DISTINCT __pgt_row_id) FROM p_bag")
            .unwrap()
            .trim(),
        "0",
        "p_bag holds duplicate rows"
    );
    dst.run("DROP SUBSCRIPTION stream_sub").unwrap();
    subscriber.remove().unwrap();
    publisher.remove().unwrap();
}
