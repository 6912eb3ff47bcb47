//! Stream tables fed from the WAL (issue 34, spec/stream-tables.md §5.6): one seeded random
//! workload over keyed sources (int8, text, uuid, a composite and an enum key) and a keyless
//! one with duplicates and NULLs, its sources captured twice, by the extension's trigger and
//! by `rowid-cdc --sink postgres:` from a logical slot into
//! `pgtrickle_changes.rowid_cdc_<oid>`. Every query is kept twice, DIFFERENTIAL with `cdc_mode => 'trigger'` and with `cdc_mode =>
//! 'wal'`. After every refresh each WAL-fed stream table equals its query run fresh and holds
//! the same multiset of `(__pgt_row_id, columns)` as its trigger-fed twin: the two capture
//! paths feed one differential refresh, byte for byte (proposal §14.3).
//!
//! Also: a writer whose transaction is open when a refresh starts (the refresh waits for it,
//! then consumes it once); columns added to sources; `alter_stream_table` between the two
//! paths; a refresh in a transaction that wrote a source, or in REPEATABLE
//! READ, refused by name; IMMEDIATE with `cdc_mode => 'wal'` refused before anything exists;
//! a refresh with no consumer on the slot refused by name.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Child, Command, Stdio};

use rowid_testkit::psql::Psql;
use rowid_testkit::rng::Rng;
use rowid_testkit::session::Session;

const DB: &str = "rowid_cdc_stream_wal";
const SLOT: &str = "rowid_cdc_stream_wal_slot";

/// The consumer, killed when the test ends (also by a failed assertion).
struct Consumer(Child);

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (stream table, its columns, query): every operator with a DIFFERENTIAL rule.
const QUERIES: &[(&str, &str, &str)] = &[
    ("w_f", "id, v", "SELECT id, v FROM w_int WHERE v > 10"),
    (
        "w_g",
        "g, n, nv, s, lo, hi, a",
        "SELECT g, count(*) AS n, count(v) AS nv, sum(v) AS s, min(v) AS lo, max(v) AS hi, \
         avg(v) AS a FROM w_int GROUP BY g",
    ),
    (
        "w_h",
        "g, n",
        "SELECT g, count(*) AS n FROM w_int GROUP BY g HAVING count(*) > 1",
    ),
    (
        "w_s",
        "n, s",
        "SELECT count(*) AS n, sum(v) AS s FROM w_int",
    ),
    (
        "w_j",
        "id, code",
        "SELECT i.id, t.code FROM w_int i JOIN w_text t ON t.g = i.g",
    ),
    ("w_b", "x, y", "SELECT x, y FROM w_bag"),
    (
        "w_bj",
        "x, n, s",
        "SELECT b.x, count(*) AS n, sum(i.v) AS s FROM w_bag b JOIN w_int i ON i.g = b.x \
         GROUP BY b.x",
    ),
    ("w_d", "g", "SELECT DISTINCT g FROM w_int"),
    ("w_u", "g", "SELECT g FROM w_int UNION SELECT g FROM w_text"),
    (
        "w_e",
        "x",
        "SELECT x FROM w_bag EXCEPT ALL SELECT g FROM w_int",
    ),
    (
        "w_ua",
        "g",
        "SELECT g FROM w_int UNION ALL SELECT x FROM w_bag",
    ),
    ("w_uu", "u, v", "SELECT u, v FROM w_uuid"),
    (
        "w_cp",
        "a, b, v",
        "SELECT a, b, v FROM w_comp WHERE v IS NOT NULL",
    ),
    ("w_en", "e, v", "SELECT e, v FROM w_enum"),
    (
        "w_eg",
        "e, n, s",
        "SELECT e, count(*) AS n, sum(c.v) AS s FROM w_enum e JOIN w_comp c ON c.a = e.v \
         GROUP BY e",
    ),
    (
        "w_c",
        "id, code",
        "WITH big AS (SELECT id, g FROM w_int WHERE v > 5) \
         SELECT b.id, t.code FROM big b JOIN w_text t ON t.g = b.g",
    ),
    (
        "w_ca",
        "code, s, n",
        "WITH tot AS (SELECT g, sum(v) AS s, count(*) AS n FROM w_int GROUP BY g) \
         SELECT t.code, tot.s, tot.n FROM w_text t JOIN tot ON tot.g = t.g",
    ),
    (
        "w_sd",
        "x, y, g",
        "SELECT b.x, b.y, d.g FROM w_bag b JOIN (SELECT DISTINCT g FROM w_int) AS d \
         ON d.g = b.x",
    ),
];

/// Runs `writes`, then in the same session at once (before the sink can have written their
/// changes) refreshes every WAL-fed stream table, then the trigger-fed ones; then checks each
/// WAL-fed one against its query and its trigger-fed twin.
fn refresh_and_compare(db: &Psql, writes: &str, when: &str) {
    let mut script = String::from(writes);
    for (name, _, _) in QUERIES {
        script.push_str(&format!(
            "SELECT pgtrickle.refresh_stream_table('{name}_w');\n"
        ));
    }
    for (name, _, _) in QUERIES {
        script.push_str(&format!(
            "SELECT pgtrickle.refresh_stream_table('{name}_t');\n"
        ));
    }
    db.run(&script).unwrap();
    for (name, columns, query) in QUERIES {
        assert_eq!(
            db.multiset_difference(&format!("SELECT {columns} FROM {name}_w"), query),
            0,
            "{when}: {name}_w differs from its query"
        );
        assert_eq!(
            db.multiset_difference(
                &format!("SELECT __pgt_row_id, {columns} FROM {name}_w"),
                &format!("SELECT __pgt_row_id, {columns} FROM {name}_t"),
            ),
            0,
            "{when}: {name}_w and {name}_t hold other identities or rows"
        );
    }
}

/// One random statement of the workload.
fn statement(rng: &mut Rng) -> String {
    let id = rng.below(60) + 1;
    let g = rng.below(6);
    let v = rng.below(30);
    let x = match rng.below(7) {
        0 => "NULL".to_string(),
        n => (n - 1).to_string(),
    };
    let mood = ["sad", "ok", "happy"][rng.below(3)];
    match rng.below(16) {
        0..=2 => format!(
            "INSERT INTO w_int VALUES ({id}, {g}, {v}) ON CONFLICT (id) DO UPDATE SET v = {v};"
        ),
        3 => format!("UPDATE w_int SET g = {g} WHERE id = {id};"),
        4 => format!(
            "UPDATE w_int SET id = id + 100 WHERE id = {id} \
             AND NOT EXISTS (SELECT FROM w_int WHERE id = {id} + 100);"
        ),
        5 => format!("DELETE FROM w_int WHERE id = {id};"),
        6 => format!(
            "INSERT INTO w_text VALUES ('c{id}', {g}) ON CONFLICT (code) DO UPDATE SET g = {g};"
        ),
        7 => format!("DELETE FROM w_text WHERE code = 'c{id}';"),
        8 | 9 => format!("INSERT INTO w_bag VALUES ({x}, 'y{v}'), ({x}, 'y{v}');"),
        10 => format!(
            "DELETE FROM w_bag WHERE ctid = (SELECT ctid FROM w_bag \
             WHERE x IS NOT DISTINCT FROM {x} LIMIT 1);"
        ),
        11 => format!(
            "UPDATE w_bag SET y = 'z{v}' WHERE ctid = (SELECT ctid FROM w_bag \
             WHERE x IS NOT DISTINCT FROM {x} LIMIT 1);"
        ),
        12 => format!(
            "INSERT INTO w_uuid VALUES (md5('{id}')::uuid, {v}) \
             ON CONFLICT (u) DO UPDATE SET v = {v};"
        ),
        13 => format!("DELETE FROM w_uuid WHERE u = md5('{id}')::uuid;"),
        14 => format!(
            "INSERT INTO w_comp VALUES ({g}, 'b{x}', {v}) ON CONFLICT (a, b) DO UPDATE SET v = \
             NULLIF({v}, 7); UPDATE w_comp SET a = a + 10 WHERE a = {g} AND b = 'b{x}' AND \
             v > 20 AND NOT EXISTS (SELECT FROM w_comp c WHERE c.a = {g} + 10 AND c.b = 'b{x}');"
        ),
        _ => format!(
            "INSERT INTO w_enum VALUES ('{mood}', {v}) ON CONFLICT (e) DO UPDATE SET v = {v}; \
             DELETE FROM w_enum WHERE v = 0;"
        ),
    }
}

/// Waits until the slot's `active` is `active` (`t`: a consumer streams from it).
fn slot_active(db: &Psql, active: &str) {
    db.wait_for(
        &format!("SELECT active FROM pg_replication_slots WHERE slot_name = '{SLOT}';"),
        active,
        "the slot's active",
    );
}

/// The SQLSTATE and message of `sql`, which must fail.
fn failure(db: &Psql, sql: &str) -> String {
    db.run(&format!("\\set VERBOSITY verbose\n{sql}"))
        .expect_err("must fail")
}

/// `create_stream_table(name, 'SELECT id FROM w_int', args)` fails with an error holding
/// every one of `words` (SQLSTATE and message), and leaves no table `name` behind.
fn refused_before_anything_exists(db: &Psql, name: &str, args: &str, words: &[&str]) {
    let err = failure(
        db,
        &format!("SELECT pgtrickle.create_stream_table('{name}', 'SELECT id FROM w_int', {args});"),
    );
    assert!(words.iter().all(|w| err.contains(w)), "{err}");
    assert_eq!(
        db.run(&format!("SELECT to_regclass('{name}') IS NULL;"))
            .unwrap()
            .trim(),
        "t"
    );
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn wal_fed_stream_tables_equal_their_queries_and_their_trigger_fed_twins() {
    let src = Psql::fresh_database_without_slot(DB, SLOT).unwrap();
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE w_int (id int8 PRIMARY KEY, g int4, v numeric);
         -- the default replica identity: an update's old image holds the key only, so the
         -- refresh of a window holding one recomputes (spec §5.2), still exactly
         CREATE TABLE w_text (code text PRIMARY KEY, g int4);
         CREATE TABLE w_bag (x int4, y text);
         CREATE TABLE w_uuid (u uuid PRIMARY KEY, v int4);
         CREATE TABLE w_comp (a int4, b text, v int4, PRIMARY KEY (a, b));
         CREATE TYPE w_mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE w_enum (e w_mood PRIMARY KEY, v int4);
         ALTER TABLE w_int REPLICA IDENTITY FULL;
         ALTER TABLE w_bag REPLICA IDENTITY FULL;
         ALTER TABLE w_uuid REPLICA IDENTITY FULL;
         ALTER TABLE w_comp REPLICA IDENTITY FULL;
         ALTER TABLE w_enum REPLICA IDENTITY FULL;
         CREATE PUBLICATION w_pub FOR TABLE w_int, w_text, w_bag, w_uuid, w_comp, w_enum;",
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("rowid-cdc-stream-wal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let consumer = Consumer(
        Command::new(env!("CARGO_BIN_EXE_rowid-cdc"))
            .args([
                "--dsn",
                &src.dsn(),
                "--slot",
                SLOT,
                "--publication",
                "w_pub",
                "--create-slot",
            ])
            .arg("--state")
            .arg(dir.join("cdc.state"))
            .args(["--sink", "postgres:"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    slot_active(&src, "t");

    // Before any change streamed there is no buffer: refused by name, nothing created.
    refused_before_anything_exists(
        &src,
        "early",
        "cdc_mode => 'wal'",
        &["55000", "no WAL change buffer"],
    );

    src.run(
        "INSERT INTO w_int SELECT i, i % 5, i * 3 FROM generate_series(1, 20) i;
         INSERT INTO w_text SELECT 'c' || i, i % 4 FROM generate_series(1, 8) i;
         INSERT INTO w_bag VALUES (1, 'a'), (1, 'a'), (NULL, 'n'), (2, 'b');
         INSERT INTO w_uuid SELECT md5(i::text)::uuid, i FROM generate_series(1, 5) i;
         INSERT INTO w_comp SELECT i % 3, 'b' || i, i FROM generate_series(1, 6) i;
         INSERT INTO w_enum VALUES ('sad', 1), ('ok', 2);",
    )
    .unwrap();
    // The buffers exist once the sink wrote these changes.
    src.wait_for(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'pgtrickle_changes' AND c.relname IN \
         (SELECT 'rowid_cdc_' || t::regclass::oid FROM unnest(ARRAY['w_int', 'w_text', \
          'w_bag', 'w_uuid', 'w_comp', 'w_enum']) AS t);",
        "6",
        "the sink's buffers",
    );

    // IMMEDIATE (and FULL) with cdc_mode 'wal': refused before anything exists.
    refused_before_anything_exists(
        &src,
        "imm",
        "refresh_mode => 'IMMEDIATE', cdc_mode => 'wal'",
        &["0A000", "inside the writing statement"],
    );

    let mut create = String::new();
    for (name, _, query) in QUERIES {
        create.push_str(&format!(
            "SELECT pgtrickle.create_stream_table('{name}_t', $q${query}$q$);\n\
             SELECT pgtrickle.create_stream_table('{name}_w', $q${query}$q$, \
               cdc_mode => 'wal');\n"
        ));
    }
    src.run(&create).unwrap();
    assert_eq!(
        src.run(
            "SELECT count(*) FROM pgtrickle.pgt_stream_tables WHERE cdc_mode = 'wal' \
             AND refresh_mode = 'DIFFERENTIAL';"
        )
        .unwrap()
        .trim(),
        QUERIES.len().to_string()
    );
    refresh_and_compare(&src, "", "after create");

    // The seeded workload: a few statements per transaction, a refresh after each.
    let mut rng = Rng::new(0x5eed_0034);
    for round in 0..40 {
        let mut script = String::from("BEGIN;\n");
        for _ in 0..(1 + rng.below(4)) {
            script.push_str(&statement(&mut rng));
            script.push('\n');
        }
        if round % 13 == 12 {
            script.push_str("TRUNCATE w_bag;\nINSERT INTO w_bag VALUES (3, 't'), (3, 't');\n");
        }
        script.push_str("COMMIT;\n");
        refresh_and_compare(&src, &script, &format!("round {round}"));
    }

    // A writer whose transaction is open when the refresh starts: the refresh waits for it
    // (its SHARE lock on the source), then the sink's copy of it, and consumes it once.
    let mut writer = Session::open(&src, "stream_wal_writer");
    writer.run(
        &src,
        "BEGIN; INSERT INTO w_int VALUES (900, 1, 50), (901, 2, 60);",
    );
    let mut refresher = Session::open(&src, "stream_wal_refresher");
    refresher.send("BEGIN; SELECT pgtrickle.refresh_stream_table('w_g_w');");
    refresher.wait(&src, "Lock");
    writer.finish();
    refresher.wait(&src, "idle in transaction");
    refresher.finish();
    refresh_and_compare(&src, "", "after the writer that was open during a refresh");

    // A transaction that wrote a source refreshes after its COMMIT, not before; REPEATABLE
    // READ cannot see what the sink writes after its snapshot.
    let err = failure(
        &src,
        "BEGIN; INSERT INTO w_int VALUES (950, 1, 1); \
         SELECT pgtrickle.refresh_stream_table('w_g_w');",
    );
    assert!(
        err.contains("0A000") && err.contains("refresh after COMMIT") && err.contains("w_int"),
        "{err}"
    );
    let err = failure(
        &src,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT pgtrickle.refresh_stream_table('w_g_w');",
    );
    assert!(
        err.contains("0A000") && err.contains("READ COMMITTED"),
        "{err}"
    );
    refresh_and_compare(&src, "", "after the refused refreshes");

    // Source DDL: a column added to two WAL-fed sources (one keyless, whose identity takes
    // it; the sink reshapes their buffers at the DDL's commit) rebuilds the stream tables at
    // their next refresh, before any write of the new shape; then writes of it are consumed.
    src.run("ALTER TABLE w_int ADD COLUMN extra int4; ALTER TABLE w_bag ADD COLUMN z int4;")
        .unwrap();
    refresh_and_compare(&src, "", "after a column was added");
    refresh_and_compare(
        &src,
        "INSERT INTO w_int VALUES (700, 1, 70, 7); UPDATE w_int SET extra = 1 WHERE id < 10; \
         INSERT INTO w_bag VALUES (1, 'a', 5); UPDATE w_bag SET z = 6 WHERE x = 2;\n",
        "after writes of the new shape",
    );
    // alter_stream_table keeps cdc_mode unless given, and moves a stream table between the
    // two capture paths.
    src.run(
        "SELECT pgtrickle.alter_stream_table('w_j_w', refresh_mode => 'DIFFERENTIAL');
         SELECT pgtrickle.alter_stream_table('w_f_t', cdc_mode => 'wal');
         SELECT pgtrickle.alter_stream_table('w_d_w', cdc_mode => 'trigger');",
    )
    .unwrap();
    assert_eq!(
        src.run(
            "SELECT string_agg(pgt_relid::regclass || '=' || cdc_mode, ',' \
               ORDER BY pgt_relid::regclass::text) \
             FROM pgtrickle.pgt_stream_tables \
             WHERE pgt_relid IN ('w_j_w'::regclass, 'w_f_t'::regclass, 'w_d_w'::regclass);"
        )
        .unwrap()
        .trim(),
        "w_d_w=trigger,w_f_t=wal,w_j_w=wal"
    );
    refresh_and_compare(
        &src,
        "DELETE FROM w_int WHERE id = 700;\n",
        "after alter_stream_table",
    );

    // Nothing streams from the slot: the refresh says so instead of waiting.
    drop(consumer);
    slot_active(&src, "f");
    src.run("INSERT INTO w_int VALUES (990, 1, 1);").unwrap();
    let err = failure(&src, "SELECT pgtrickle.refresh_stream_table('w_g_w');");
    assert!(
        err.contains("55000") && err.contains("is rowid-cdc running?"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
