//! The design proposal's final oracle for the replica sink (issue 22): a randomized workload
//! on tables keyed by many scalar types, an enum, a composite and an array, a table whose
//! primary key moves between two columns, and keyless tables with duplicate rows; TOASTed
//! values left unchanged by updates, key-changing updates, one identity changed several
//! times in a transaction, columns renamed between changes inside transactions, and
//! TRUNCATE followed by inserts; the consumer SIGKILLed at random points and restarted, and
//! the server crashed once under it. At the end every storage table equals its source as a
//! multiset (`EXCEPT ALL` both ways empty) and in every value's text (`md5` of the sorted
//! rows: equality alone forgives a numeric's scale), and every stored `__pgt_row_id` is
//! `encode_row_id_v2` of its row under the table's key at the end.
//!
//! The replica is kept in the source database (`replica:` with `--replica-schema`), so one
//! query compares both sides. With [`TARGET_ENV`] set (`cargo xtask test` does so once, a
//! PostgreSQL 18 target for the PostgreSQL 15 source), it is kept in a database of that other
//! cluster instead, whose binary forms and catalogs are another major's; the sides are then
//! compared by the multiset of their rows' text (sorted bytewise, in one fixed set of output
//! settings): equal texts are equal values, so this implies `EXCEPT ALL` both ways empty,
//! and it is stricter (a numeric's scale, a float's `-0`). Needs a server with
//! `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cdc, Dir, DropSlot, Running, database, one};
use rowid_testkit::psql::Psql;
use rowid_testkit::rng::Rng;

const SLOT: &str = "rowid_replica_oracle";

/// psql connection arguments of another cluster to keep the replica in (see the module).
const TARGET_ENV: &str = "ROWID_REPLICA_TARGET_PSQL_ARGS";

/// The user types the storage tables need, created on a remote target too.
const TYPES: &str = "CREATE TYPE mood AS ENUM ('a', 'b', 'c', 'd', 'e');
         CREATE TYPE pair AS (x int4, y text);";

/// Output settings under which both sides print their rows' text.
const TEXT_SETTINGS: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; \
    SET IntervalStyle = postgres; SET extra_float_digits = 1; SET bytea_output = hex;";
const SCHEMA: &str = "oracle_replica";

/// Keyed tables: name, key type, the key for integer `$i` (distinct `$i`, distinct keys).
const KEYED: &[(&str, &str, &str)] = &[
    ("k_int2", "int2", "($i)::int2"),
    ("k_int4", "int4", "($i)::int4"),
    ("k_int8", "int8", "($i)::int8 * 1000000007"),
    ("k_numeric", "numeric", "($i)::numeric / 8"),
    ("k_float8", "float8", "($i)::float8 / 3"),
    ("k_text", "text", "'key ' || $i"),
    ("k_varchar", "varchar(20)", "('v' || $i)::varchar(20)"),
    ("k_bytea", "bytea", "int8send(($i)::int8)"),
    ("k_uuid", "uuid", "md5(($i)::text)::uuid"),
    ("k_date", "date", "'2000-01-01'::date + $i"),
    (
        "k_ts",
        "timestamptz",
        "'2000-01-01 00:00+00'::timestamptz + ($i) * interval '61 minutes'",
    ),
    ("k_interval", "interval", "($i) * interval '1 day 1 second'"),
    (
        "k_inet",
        "inet",
        "('10.1.' || (($i) / 256) || '.' || (($i) % 256))::inet",
    ),
    ("k_enum", "mood", "(enum_range(NULL::mood))[1 + (($i) % 5)]"),
    ("k_pair", "pair", "ROW($i, 'p' || $i)::pair"),
    ("k_arr", "int4[]", "ARRAY[$i, ($i) * 2]"),
];

/// Keyless tables (REPLICA IDENTITY FULL): name, the second column's type.
const KEYLESS: &[(&str, &str)] = &[("kl_int", "int4"), ("kl_text", "text")];

/// Keys per table: small, so transactions meet the same rows again.
const KEYS: usize = 24;

fn key(expr: &str, i: usize) -> String {
    expr.replace("$i", &i.to_string())
}

fn setup(src: &Psql) {
    let mut sql = format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         {TYPES}
         CREATE TABLE k_move (id int8 PRIMARY KEY, code text UNIQUE NOT NULL, v int4);
         INSERT INTO k_move SELECT g, 'code ' || g, g FROM generate_series(1, 10) g;\n",
    );
    let mut tables = vec!["k_move".to_string()];
    for (name, ty, expr) in KEYED {
        sql.push_str(&format!(
            "CREATE TABLE {name} (k {ty} PRIMARY KEY, v int4, doc text);
             ALTER TABLE {name} ALTER COLUMN doc SET STORAGE EXTERNAL;
             INSERT INTO {name} SELECT k, 0, 'before the slot' FROM
               (SELECT DISTINCT {k} AS k FROM generate_series(0, 4) AS s(i)) AS x;\n",
            k = expr.replace("$i", "s.i"),
        ));
        tables.push((*name).to_string());
    }
    for (name, ty) in KEYLESS {
        sql.push_str(&format!(
            "CREATE TABLE {name} (a int4, b {ty});
             ALTER TABLE {name} REPLICA IDENTITY FULL;
             INSERT INTO {name} VALUES (1, NULL), (1, NULL);\n"
        ));
        tables.push((*name).to_string());
    }
    sql.push_str(&format!(
        "CREATE PUBLICATION p FOR TABLE {};",
        tables.join(", ")
    ));
    src.run(&sql).unwrap();
}

/// A large value, kept out of line.
const TOASTED: &str = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 80))";

/// One random statement on a keyed table.
fn keyed_statement(rng: &mut Rng, name: &str, expr: &str) -> String {
    let (i, j) = (rng.below(KEYS), rng.below(KEYS));
    let (ki, kj) = (key(expr, i), key(expr, j));
    match rng.below(9) {
        0 | 1 => format!(
            "INSERT INTO {name} VALUES ({ki}, {}, {}) ON CONFLICT DO NOTHING;",
            rng.below(100),
            if rng.chance(30) { TOASTED } else { "'short'" }
        ),
        // Leaves the TOASTed doc alone.
        2 | 3 => format!("UPDATE {name} SET v = v + 1 WHERE k = {ki};"),
        // A key change.
        4 => format!(
            "UPDATE {name} SET k = {kj} WHERE k = {ki} \
             AND NOT EXISTS (SELECT FROM {name} WHERE k = {kj});"
        ),
        5 => format!("DELETE FROM {name} WHERE k = {ki};"),
        // One identity changed several times.
        6 => format!(
            "UPDATE {name} SET v = v + 1 WHERE k = {ki}; UPDATE {name} SET v = v * 2 WHERE k = {ki}; \
             DELETE FROM {name} WHERE k = {ki}; INSERT INTO {name} VALUES ({ki}, 7, 'again');"
        ),
        // A column renamed and back around a change, in the transaction.
        7 => format!(
            "ALTER TABLE {name} RENAME COLUMN v TO v_renamed; \
             UPDATE {name} SET v_renamed = -1 WHERE k = {ki}; \
             ALTER TABLE {name} RENAME COLUMN v_renamed TO v;"
        ),
        _ => format!("UPDATE {name} SET doc = 'rewritten ' || v WHERE k = {ki};"),
    }
}

/// One random statement on a keyless table.
fn keyless_statement(rng: &mut Rng, name: &str, ty: &str) -> String {
    let a = rng.below(4);
    let b = if ty == "text" {
        format!("'b{}'", rng.below(3))
    } else {
        rng.below(3).to_string()
    };
    let one_row = format!("(SELECT ctid FROM {name} WHERE a = {a} LIMIT 1)");
    match rng.below(4) {
        0 => format!(
            "INSERT INTO {name} SELECT {a}, {b} FROM generate_series(1, {});",
            1 + rng.below(3)
        ),
        1 => format!("DELETE FROM {name} WHERE ctid = {one_row};"),
        2 => format!("UPDATE {name} SET b = {b} WHERE ctid = {one_row};"),
        _ => format!("UPDATE {name} SET a = a + 1 WHERE ctid = {one_row};"),
    }
}

/// A random transaction.
fn transaction(rng: &mut Rng) -> String {
    let mut sql = String::from("BEGIN;\n");
    for _ in 0..1 + rng.below(6) {
        let stmt = match rng.below(20) {
            0 => {
                // The primary key moves to the other unique column, or back.
                "DO $$ BEGIN IF (SELECT a.attname FROM pg_index i JOIN pg_attribute a \
                 ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
                 WHERE i.indrelid = 'k_move'::regclass AND i.indisprimary) = 'id' THEN \
                 ALTER TABLE k_move DROP CONSTRAINT k_move_pkey, ADD CONSTRAINT k_move_pkey PRIMARY KEY (code); \
                 ELSE ALTER TABLE k_move DROP CONSTRAINT k_move_pkey, ADD CONSTRAINT k_move_pkey PRIMARY KEY (id); \
                 END IF; END $$;"
                    .to_string()
            }
            1 => {
                let id = rng.below(10) + 1;
                format!(
                    "UPDATE k_move SET v = v + 1, code = 'code ' || {id} || '/' || v WHERE id = {id};"
                )
            }
            2 => {
                // Rows, a TRUNCATE, rows again.
                let (name, _, expr) = *rng.pick(KEYED);
                format!(
                    "INSERT INTO {name} VALUES ({}, 2, 'gone') ON CONFLICT DO NOTHING; TRUNCATE {name}; \
                     INSERT INTO {name} VALUES ({}, 1, 'after truncate');",
                    key(expr, rng.below(KEYS)),
                    key(expr, 0)
                )
            }
            3..=5 => {
                let (name, ty) = *rng.pick(KEYLESS);
                keyless_statement(rng, name, ty)
            }
            _ => {
                let (name, _, expr) = *rng.pick(KEYED);
                keyed_statement(rng, name, expr)
            }
        };
        sql.push_str(&stmt);
        sql.push('\n');
    }
    sql.push_str("COMMIT;\n");
    sql
}

/// Crashes the server under the consumer (SIGKILL to its walsender: crash recovery) and
/// waits until it accepts connections again.
fn crash_server(src: &Psql, consumer: &mut Running) {
    let t = Instant::now();
    let pid = loop {
        let pid = one(
            src,
            &format!("SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{SLOT}';"),
        );
        if !pid.is_empty() {
            break pid;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the consumer never connected: {}",
            consumer.report()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    while src.run("SELECT 1;").is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the server did not come back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The columns of `table` at the source now, in order.
fn columns(src: &Psql, table: &str) -> String {
    one(
        src,
        &format!(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute \
             WHERE attrelid = '{table}'::regclass AND attnum > 0 AND NOT attisdropped;"
        ),
    )
}

/// The identity expression of `table` under its key now.
fn identity(src: &Psql, table: &str, cols: &str) -> String {
    let key = one(
        src,
        &format!(
            "SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.n) FROM pg_index i, \
             unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a \
             ON a.attnum = k.attnum WHERE i.indrelid = '{table}'::regclass AND i.indisprimary \
             AND a.attrelid = i.indrelid;"
        ),
    );
    if key.is_empty() {
        format!("'KEYLESS_ROW', ROW({cols})")
    } else {
        format!("'SCAN_KEY', ROW({key})")
    }
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_replica_under_a_random_workload_kills_and_a_crash_equals_its_sources() {
    let src = database("rowid_cdc_replica_oracle", SLOT);
    let _drop = DropSlot(&src, SLOT);
    setup(&src);
    let dir = Dir::new("replica-oracle");
    let cdc = Cdc {
        dsn: src.dsn(),
        slot: SLOT,
        publication: "p",
        dir: &dir,
    };
    // The storage's database: the source's, or one on the cluster TARGET_ENV names.
    let remote = std::env::var(TARGET_ENV).ok().map(|args| {
        let server = Psql::new("psql", &args);
        server
            .run(
                "DROP DATABASE IF EXISTS rowid_cdc_replica_oracle_dst WITH (FORCE);
                 CREATE DATABASE rowid_cdc_replica_oracle_dst;",
            )
            .unwrap();
        let target = server.with_db("rowid_cdc_replica_oracle_dst");
        target
            .run(&format!("CREATE EXTENSION pg_trickle_ext; {TYPES}"))
            .unwrap();
        target
    });
    let (target, sink) = match &remote {
        Some(target) => (target, format!("replica:{}", target.dsn())),
        None => (&src, "replica:".to_string()),
    };
    if remote.is_some() {
        eprintln!(
            "the replica on another cluster: {}",
            one(target, "SELECT version();")
        );
    }
    let start = |extra: &[&str]| {
        let mut args = vec!["--replica-schema", SCHEMA];
        args.extend_from_slice(extra);
        Running(cdc.command_into(&sink, &args).spawn().unwrap())
    };
    let mut rng = Rng::new(0x0A_C1E);
    let mut consumer = start(&["--create-slot", "--snapshot"]);
    // The first kill may come after the first 8 transactions: the copy under the exported
    // snapshot (the keyless tables) must be over by then, or the restart refuses, by design.
    cdc.wait_snapshot_copied(&mut consumer);
    let (mut kills, mut crashed) = (0, false);
    for round in 0..16 {
        for _ in 0..8 {
            src.run(&transaction(&mut rng)).unwrap();
        }
        if round == 8 {
            crash_server(&src, &mut consumer);
            crashed = true;
        } else if rng.chance(40) {
            // SIGKILL at whatever point it is, and back.
            // (Restarted at once: the killed one's server process may still hold the slot.)
            drop(consumer);
            kills += 1;
            consumer = start(&[]);
        }
    }
    assert!(kills >= 3 && crashed, "{kills} kills");
    // Everything written before this marker is applied once the marker is.
    src.run("INSERT INTO k_int4 VALUES (1000000, 0, 'marker');")
        .unwrap();
    let t = Instant::now();
    while target
        .run(&format!(
            "SELECT count(*) FROM {SCHEMA}.k_int4 WHERE k = 1000000;"
        ))
        .map(|s| s.trim() != "1")
        .unwrap_or(true)
    {
        consumer.still_within(t, Duration::from_secs(120), "the replica did not catch up");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(consumer);
    let mut tables: Vec<&str> = vec!["k_move"];
    tables.extend(KEYED.iter().map(|(n, _, _)| *n));
    tables.extend(KEYLESS.iter().map(|(n, _)| *n));
    for table in tables {
        let cols = columns(&src, table);
        if remote.is_none() {
            let diff = one(
                &src,
                &format!(
                    "SELECT count(*) FROM ((SELECT {cols} FROM {table} EXCEPT ALL \
                     SELECT {cols} FROM {SCHEMA}.{table}) UNION ALL (SELECT {cols} FROM \
                     {SCHEMA}.{table} EXCEPT ALL SELECT {cols} FROM {table})) AS d;"
                ),
            );
            assert_eq!(diff, "0", "{table}: EXCEPT ALL both ways");
        }
        let text = |db: &Psql, relation: &str| {
            let out = db
                .run(&format!(
                    "{TEXT_SETTINGS} SELECT count(*) || ' ' || \
                     coalesce(md5(string_agg(r, E'\\n' ORDER BY r COLLATE \"C\")), '') FROM \
                     (SELECT ({cols})::text AS r FROM {relation}) AS x;"
                ))
                .unwrap();
            out.trim().lines().last().unwrap_or_default().to_string()
        };
        assert_eq!(
            text(target, &format!("{SCHEMA}.{table}")),
            text(&src, table),
            "{table}: the rows' text (count and md5 of the sorted texts)"
        );
        let id = identity(&src, table, &cols);
        assert_eq!(
            one(
                target,
                &format!(
                    "SELECT count(*) FROM {SCHEMA}.{table} WHERE \"__pgt_row_id\" \
                     IS DISTINCT FROM pgtrickle.encode_row_id_v2({id});"
                )
            ),
            "0",
            "{table}: every identity is encode_row_id_v2({id}) of its row"
        );
    }
}
