//! Cross-path: one workload captured twice, by the extension's capture trigger
//! (`pgtrickle.capture_table`) into per-table change buffers, and by `rowid-cdc` from a
//! logical slot into per-table change buffers of another database. Per transaction, the two
//! give the same sequence of (relation, op, old identity, new identity), byte for byte, and
//! the same row images (spec/change-buffer.md §1b: every new value; the old values the WAL
//! carries, all of them under REPLICA IDENTITY FULL): inserts, key-changing updates, deletes,
//! truncates, a rolled-back savepoint, a TOASTed row updated through a sibling column (FULL:
//! the WAL path backfills it), a primary key moved between transactions, a keyless table
//! with a generated column (left out of identities and images on both paths), and ADD,
//! RENAME, ALTER TYPE and DROP COLUMN between and inside transactions, followed by both
//! buffers before the next change. Identity redefinitions (a primary key moved, two enum
//! labels of a key swapped, a column retyped: a rewrite) are marked by an `R` row with the
//! same reason at the same place in the transaction on both paths (spec/change-buffer.md
//! §1d).
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rowid_testkit::psql::Psql;

const DB: &str = "rowid_cdc_cross";
const SINK_DB: &str = "rowid_cdc_cross_sink";
const SLOT: &str = "rowid_cdc_cross_slot";

/// The consumer, killed when the test ends, also by a failed assertion (left running it
/// would hold the test's output open).
struct Consumer(std::process::Child);

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh database `db` on the test server.
fn database(db: &str) -> Psql {
    Psql::fresh_database(db).unwrap()
}

/// One buffer row: (relid, op, old identity, new identity), then the old image's kind, the
/// new image and the old image (JSON objects of the `new_`/`old_` columns).
#[derive(Debug, PartialEq)]
struct Change {
    identities: (String, String, String, String),
    old_image: String,
    new: serde_json::Value,
    old: serde_json::Value,
}

/// Transaction id -> the changes of that transaction in order.
type ByTransaction = BTreeMap<String, Vec<Change>>;

fn by_transaction(rows: &str) -> ByTransaction {
    let mut out = ByTransaction::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let p: Vec<&str> = line.splitn(8, '|').collect();
        let json = |s: &str| serde_json::from_str(s).unwrap_or(serde_json::Value::Null);
        out.entry(p[0].to_string()).or_default().push(Change {
            identities: (
                p[1].to_string(),
                p[2].to_string(),
                p[3].to_string(),
                p[4].to_string(),
            ),
            old_image: p[5].to_string(),
            new: json(p[6]),
            old: json(p[7]),
        });
    }
    out
}

/// A buffer row as `by_transaction` reads it (the images as JSON: `|` never appears in the
/// workload's values).
const COLUMNS: &str = "xid, source_relid, op::text || coalesce(': ' || unidentified, ''), coalesce(encode(__pgt_old_row_id, 'hex'), ''), \
     coalesce(encode(__pgt_row_id, 'hex'), ''), coalesce(old_image::text, ''), \
     (SELECT coalesce(jsonb_object_agg(key, value), '{}') FROM jsonb_each(to_jsonb(c)) \
      WHERE key LIKE 'new\\_%'), \
     (SELECT coalesce(jsonb_object_agg(key, value), '{}') FROM jsonb_each(to_jsonb(c)) \
      WHERE key LIKE 'old\\_%' AND key <> 'old_image')";

/// The WAL's change agrees with the trigger's: the same identities and new image; the old
/// image whole under `F`, else every old value the WAL has (the key's) equal to the
/// trigger's.
fn agrees(wal: &Change, trigger: &Change) -> bool {
    if wal.identities != trigger.identities || wal.new != trigger.new {
        return false;
    }
    match wal.old_image.as_str() {
        "F" => wal.old == trigger.old,
        _ => wal.old.as_object().is_some_and(|old| {
            old.iter()
                .filter(|(_, v)| !v.is_null())
                .all(|(k, v)| trigger.old.get(k) == Some(v))
        }),
    }
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn trigger_and_wal_capture_agree_per_transaction() {
    let src = database(DB);
    let sink = database(SINK_DB);
    // The sink's buffers hold the source's types: the enum must exist there.
    // The sink's buffers hold the source's types: the enums must exist there, with every
    // label the source's values take (x_level's labels are swapped through 'tmp').
    sink.run(
        "CREATE TYPE x_mood AS ENUM ('sad', 'ok');
         CREATE TYPE x_level AS ENUM ('lo', 'hi', 'tmp');",
    )
    .unwrap();
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE x_mood AS ENUM ('sad', 'ok');
         CREATE TABLE x_k (id int8 PRIMARY KEY, m x_mood, v int4);
         CREATE TABLE x_move (a int4 NOT NULL, b text NOT NULL, v int4, PRIMARY KEY (a));
         CREATE TABLE x_full (a int4, big text, n int4);
         ALTER TABLE x_full ALTER COLUMN big SET STORAGE EXTERNAL;
         ALTER TABLE x_full REPLICA IDENTITY FULL;
         -- keyless, with a generated column neither path puts into the identity (inserts
         -- only: PostgreSQL 18 refuses updates of a published table whose replica identity
         -- would contain an unpublished generated column)
         CREATE TABLE x_gen (a int4, b text, g int8 GENERATED ALWAYS AS (a * 2) STORED);
         -- keyed by an enum, whose labels are the identity's bytes
         CREATE TYPE x_level AS ENUM ('lo', 'hi');
         CREATE TABLE x_e (m x_level PRIMARY KEY, n int4);
         CREATE PUBLICATION x_pub FOR TABLE x_k, x_move, x_full, x_gen, x_e;
         SELECT pgtrickle.capture_table('x_k');
         SELECT pgtrickle.capture_table('x_move');
         SELECT pgtrickle.capture_table('x_full');
         SELECT pgtrickle.capture_table('x_gen');
         SELECT pgtrickle.capture_table('x_e');",
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("rowid-cdc-cross-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let consumer = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rowid-cdc"));
        c.args([
            "--dsn",
            &src.dsn(),
            "--slot",
            SLOT,
            "--publication",
            "x_pub",
        ])
        .arg("--state")
        .arg(dir.join("cdc.state"))
        .args(["--sink", &format!("postgres:{}", sink.dsn())]);
        c
    };
    let child = Consumer(
        consumer()
            .args(["--create-slot"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while src
        .run(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{SLOT}';"
        ))
        .unwrap()
        .trim()
        != "1"
    {
        assert!(t.elapsed() < Duration::from_secs(30), "no slot");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A second consumer of the same slot is refused by name, with a non-zero exit, and
    // touches nothing.
    let t = Instant::now();
    while src
        .run(&format!(
            "SELECT active FROM pg_replication_slots WHERE slot_name = '{SLOT}';"
        ))
        .unwrap()
        .trim()
        != "t"
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the consumer never streamed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = consumer().args(["--slot-wait", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second consumer must fail");
    assert!(err.contains("is in use by the process with PID"), "{err}");

    src.run(
        "INSERT INTO x_k SELECT g, 'sad', 0 FROM generate_series(1, 50) g;
         BEGIN;
           UPDATE x_k SET id = id + 1000 WHERE id <= 10;
           UPDATE x_k SET m = 'ok' WHERE id > 40;
           SAVEPOINT s; DELETE FROM x_k WHERE id > 45; ROLLBACK TO s;
           DELETE FROM x_k WHERE id BETWEEN 20 AND 25;
           INSERT INTO x_move VALUES (1, 'x', 0), (2, 'y', 0);
         COMMIT;
         UPDATE x_move SET v = 1;
         ALTER TABLE x_move DROP CONSTRAINT x_move_pkey, ADD PRIMARY KEY (b);
         BEGIN;
           UPDATE x_move SET b = b || '!' WHERE a = 1;
           INSERT INTO x_move VALUES (3, 'z', 0);
           DELETE FROM x_move WHERE a = 2;
         COMMIT;
         INSERT INTO x_full SELECT 1, string_agg(md5(g::text), ''), 0 FROM generate_series(1, 200) g;
         INSERT INTO x_full VALUES (2, NULL, 0);
         UPDATE x_full SET n = n + 1 WHERE a = 1;
         DELETE FROM x_full WHERE a = 2;
         ALTER TABLE x_k ADD COLUMN note text;
         INSERT INTO x_k VALUES (100, 'ok', 1, 'hundred');
         BEGIN;
           ALTER TABLE x_k RENAME COLUMN v TO w;
           UPDATE x_k SET w = w + 1, note = 'x' WHERE id = 100;
           ALTER TABLE x_k ALTER COLUMN w TYPE int8;
           UPDATE x_k SET w = 5000000000 WHERE id = 100;
         COMMIT;
         ALTER TABLE x_k DROP COLUMN note;
         UPDATE x_k SET w = 1, id = 101 WHERE id = 100;
         DELETE FROM x_k WHERE id = 30;
         TRUNCATE x_k;
         INSERT INTO x_k VALUES (7, NULL, 7);
         INSERT INTO x_gen (a, b) VALUES (1, 'x'), (2, NULL);
         INSERT INTO x_e VALUES ('lo', 1);
         UPDATE x_e SET n = 2;",
    )
    .unwrap();

    let read_trigger = || {
        let rows = src
            .run(&format!(
                "SELECT * FROM (
               SELECT {COLUMNS}, seq FROM pgtrickle_changes.changes_{k} c
               UNION ALL SELECT {COLUMNS}, seq FROM pgtrickle_changes.changes_{m} c
               UNION ALL SELECT {COLUMNS}, seq FROM pgtrickle_changes.changes_{f} c
               UNION ALL SELECT {COLUMNS}, seq FROM pgtrickle_changes.changes_{g} c
               UNION ALL SELECT {COLUMNS}, seq FROM pgtrickle_changes.changes_{e} c) u
             ORDER BY 1, seq;",
                e = oid(&src, "x_e"),
                k = oid(&src, "x_k"),
                m = oid(&src, "x_move"),
                f = oid(&src, "x_full"),
                g = oid(&src, "x_gen"),
            ))
            .unwrap();
        // The trailing seq column read by by_transaction is part of the old image's text:
        // cut it.
        let rows: String = rows
            .lines()
            .map(|l| l.rsplit_once('|').map_or(l, |(row, _)| row).to_string() + "\n")
            .collect();
        by_transaction(&rows)
    };
    let before_swap = read_trigger();
    // Two labels of x_e's key swapped: x_e's identities before and after do not compare.
    src.run(
        "BEGIN;
           ALTER TYPE x_level RENAME VALUE 'lo' TO 'tmp';
           ALTER TYPE x_level RENAME VALUE 'hi' TO 'lo';
           ALTER TYPE x_level RENAME VALUE 'tmp' TO 'hi';
           INSERT INTO x_e VALUES ('lo', 3);
         COMMIT;",
    )
    .unwrap();
    let mut expected = read_trigger();
    // A trigger buffer holds enum values as the type's values (OIDs): the swap relabelled
    // the images buffered before it ('lo' now reads 'hi'), while their identities keep the
    // label they were captured with. The WAL buffer holds the labels sent. So the changes
    // before the swap are compared as they read before it, and the R row is what tells a
    // reader that the images before it no longer read as captured.
    let relabelled = expected
        .iter()
        .filter(|(xid, changes)| before_swap.get(*xid).is_some_and(|b| b != *changes))
        .count();
    assert_eq!(
        relabelled, 2,
        "the insert and the update of x_e before the swap"
    );
    expected.extend(before_swap);
    let total: usize = expected.values().map(Vec::len).sum();
    let t = Instant::now();
    let wal = loop {
        let rows = sink
            .buffer_rows("pgtrickle_changes", "rowid_cdc", COLUMNS)
            .unwrap_or_default();
        if rows.lines().count() >= total {
            break rows;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {} of {total} changes arrived",
            rows.lines().count()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(child);
    let got = by_transaction(&wal);
    eprintln!(
        "cross-path: {total} changes in {} transactions, trigger and WAL",
        expected.len()
    );
    assert_eq!(got.len(), expected.len(), "the same transactions");
    for (xid, changes) in &expected {
        let wal = got.get(xid).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(wal.len(), changes.len(), "transaction {xid}: {wal:?}");
        for (w, t) in wal.iter().zip(changes) {
            assert!(
                agrees(w, t),
                "transaction {xid}:\n WAL     {w:?}\n trigger {t:?}"
            );
        }
    }
    let ops: String = expected
        .values()
        .flatten()
        .map(|c| c.identities.1[..1].to_string())
        .collect();
    for op in ["I", "U", "D", "T"] {
        assert!(ops.contains(op), "the workload has {op}");
    }
    // The three redefinitions, each one R row (the swap of two labels is three DDL with no
    // change between), compared above with their reasons on both paths.
    let marks: Vec<&String> = expected
        .values()
        .flatten()
        .map(|c| &c.identities.1)
        .filter(|op| op.starts_with('R'))
        .collect();
    assert_eq!(marks.len(), 3, "{marks:?}");
    for (relation, why) in [
        ("public.x_move", "was redefined"),
        ("public.x_k", "rewrote its stored values"),
        ("public.x_e", "was redefined"),
    ] {
        assert!(
            marks
                .iter()
                .any(|m| m.contains(relation) && m.contains(why)),
            "{relation}: {marks:?}"
        );
    }
    // Key changes: an update whose old and new identities differ.
    assert!(
        expected
            .values()
            .flatten()
            .any(|c| c.identities.1 == "U" && c.identities.2 != c.identities.3)
    );
    // Every insert carried its new image (the comparison above compared values, not two
    // empty objects).
    assert!(
        got.values()
            .flatten()
            .filter(|c| c.identities.1 == "I")
            .all(|c| c
                .new
                .as_object()
                .is_some_and(|o| !o.is_empty() && o.values().any(|v| !v.is_null())))
    );
    // The FULL table's old images were compared whole, its TOASTed value backfilled.
    let full = oid(&src, "x_full");
    assert!(
        got.values()
            .flatten()
            .any(|c| c.identities.0 == full && c.identities.1 == "U" && c.old_image == "F")
    );
    assert_eq!(
        sink.run(&format!(
            "SELECT backfilled FROM pgtrickle_changes.rowid_cdc_{full} WHERE op = 'U';"
        ))
        .unwrap(),
        "{big}\n"
    );
    // Both paths followed the DDL into the same columns.
    let k = oid(&src, "x_k");
    let shape = |db: &Psql, table: &str| {
        db.run(&format!(
            "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' \
             ORDER BY attnum) FROM pg_attribute WHERE attrelid = '{table}'::regclass \
             AND attnum > 14 AND NOT attisdropped;"
        ))
        .unwrap()
    };
    let trigger_shape = shape(&src, &format!("pgtrickle_changes.changes_{k}"));
    assert_eq!(
        trigger_shape,
        "new_id bigint, old_id bigint, new_m x_mood, old_m x_mood, new_w bigint, old_w bigint\n"
    );
    assert_eq!(
        shape(&sink, &format!("pgtrickle_changes.rowid_cdc_{k}")),
        trigger_shape
    );
    // Both buffers pass the reader's check.
    src.run("SELECT pgtrickle.check_change_buffer('pgtrickle_changes.changes_' || 'x_k'::regclass::oid);")
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(300));
    src.run(&format!("SELECT pg_drop_replication_slot('{SLOT}');"))
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn oid(psql: &Psql, table: &str) -> String {
    psql.run(&format!("SELECT '{table}'::regclass::oid;"))
        .unwrap()
        .trim()
        .to_string()
}
