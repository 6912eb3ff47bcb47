//! Identity schemas in-band, against a real server: the extension's event triggers write each
//! DDL's identity schema as a row of `pgtrickle.identity_schemas`, and capture from a pgoutput
//! slot gives every change the identity of the key in force at its own position (a key
//! changed between transactions, in the middle of one, and a DDL rolled back),
//! byte-identical to `encode_row_id_v2`. Every DDL that can change a published table's
//! identity writes its row, and a DROP rewrites only what it touched (issue 20 item 5).
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use rowid_cdc::capture::{Capture, Output};
use rowid_cdc::{Lsn, Op, RelationSchema, SchemaMessage};
use rowid_pgoutput::FlagBits;
use rowid_testkit::hex::{from_hex, to_hex};
use rowid_testkit::psql::Psql;

/// A fresh database `name`, its slot `slot` dropped first if an earlier run left it.
fn database(name: &str, slot: &str) -> Psql {
    Psql::fresh_database_without_slot(name, slot).unwrap()
}

thread_local! {
    static DB: std::cell::RefCell<Option<Psql>> = const { std::cell::RefCell::new(None) };
}

/// Runs `script` on the test's database.
fn sql(script: &str) -> String {
    DB.with(|d| {
        d.borrow()
            .as_ref()
            .expect("the test's database")
            .run(script)
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

fn one(query: &str) -> String {
    sql(query).trim().to_string()
}

fn use_database(name: &str, slot: &str) {
    let db = database(name, slot);
    DB.with(|d| *d.borrow_mut() = Some(db));
}

/// The identity schemas of `tables` as the catalog says now.
fn schemas_of(tables: &[&str]) -> Vec<RelationSchema> {
    tables
        .iter()
        .map(|t| {
            let json = one(&format!(
                "SELECT pgtrickle.identity_schema('{t}'::regclass);"
            ));
            match SchemaMessage::parse(json.as_bytes()).unwrap() {
                SchemaMessage::Schema(s) => s,
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

/// The OID of the extension's identity schema table.
fn identity_table() -> u32 {
    one("SELECT 'pgtrickle.identity_schemas'::regclass::oid;")
        .parse()
        .unwrap()
}

/// Every message of `slot` so far (publications `publication` and the identity table's),
/// through `capture`.
fn read_slot(capture: &mut Capture, slot: &str, publication: &str) -> Vec<Output> {
    let rows = sql(&format!(
        "SELECT lsn::text || '|' || encode(data, 'hex') FROM pg_logical_slot_get_binary_changes(
           '{slot}', NULL, NULL, 'proto_version', '1',
           'publication_names', '{publication},pgtrickle_identity',
           'binary', 'true', 'messages', 'true');"
    ));
    let mut out = Vec::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let (lsn, hex) = line.split_once('|').unwrap();
        capture
            .apply_bytes(
                lsn.parse().unwrap(),
                Bytes::from(from_hex(hex).unwrap()),
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }
    out
}

/// The relations whose schema each committed transaction of `out` changed, by name, in
/// commit order (transactions that changed none left out).
fn schema_changes(out: &[Output]) -> Vec<Vec<String>> {
    out.iter()
        .filter_map(|o| match o {
            Output::Commit { schema_changes, .. } if !schema_changes.is_empty() => Some(
                schema_changes
                    .iter()
                    .map(|relid| {
                        one(&format!(
                            "SELECT coalesce((SELECT relname::text FROM pg_class \
                             WHERE oid = {relid}), 'dropped:{relid}');"
                        ))
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .map(|mut v| {
            v.sort();
            v
        })
        .collect()
}

/// `encode_row_id_v2(domain, ROW(row))` in hex.
fn id(domain: &str, row: &str) -> String {
    one(&format!(
        "SELECT encode(pgtrickle.encode_row_id_v2('{domain}', ROW({row})), 'hex');"
    ))
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn changes_follow_the_key_at_their_own_position() {
    use_database("rowid_cdc_in_band", "ib_slot");
    sql("CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE ib_mood AS ENUM ('sad', 'happy');
         CREATE TABLE ib_t (a int4, b int4, v text, PRIMARY KEY (a));
         CREATE TABLE ib_e (m ib_mood PRIMARY KEY, v text);
         CREATE TABLE ib_k (x int8, y text);
         ALTER TABLE ib_k REPLICA IDENTITY FULL;
         CREATE PUBLICATION ibp FOR TABLE ib_t, ib_e, ib_k;
         SELECT pg_create_logical_replication_slot('ib_slot', 'pgoutput');");
    // The schemas at the slot's consistent point (no DDL ran since it was created).
    let schemas = schemas_of(&["ib_t", "ib_e", "ib_k"]);

    // Every statement is its own transaction unless wrapped.
    sql("INSERT INTO ib_t VALUES (1, 10, 'a');
         UPDATE ib_t SET v = 'b' WHERE a = 1;
         ALTER TABLE ib_t DROP CONSTRAINT ib_t_pkey, ADD PRIMARY KEY (a, b);
         INSERT INTO ib_t VALUES (2, 20, 'c');
         BEGIN;
         INSERT INTO ib_t VALUES (3, 30, 'd');
         ALTER TABLE ib_t DROP CONSTRAINT ib_t_pkey, ADD PRIMARY KEY (b);
         INSERT INTO ib_t VALUES (4, 40, 'e');
         COMMIT;
         BEGIN;
         ALTER TABLE ib_t DROP CONSTRAINT ib_t_pkey, ADD PRIMARY KEY (a);
         ROLLBACK;
         UPDATE ib_t SET b = 41 WHERE a = 4;
         DELETE FROM ib_t WHERE a = 1;
         INSERT INTO ib_e VALUES ('happy', 'x');
         INSERT INTO ib_k VALUES (1, 'p');
         UPDATE ib_k SET y = 'q';
         DELETE FROM ib_k;
         TRUNCATE ib_t;");

    let mut capture = Capture::new(schemas, Lsn::ZERO, FlagBits::default())
        .with_identity_table(identity_table())
        .strict(true);
    let out = read_slot(&mut capture, "ib_slot", "ibp");
    let got: Vec<(String, Op, Option<String>, Option<String>)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Change(e) => Some((
                e.relation
                    .rsplit('.')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                e.op,
                e.old_id.as_deref().map(to_hex),
                e.new_id.as_deref().map(to_hex),
            )),
            _ => None,
        })
        .collect();

    let k = |row: &str| Some(id("SCAN_KEY", row));
    let kl = |row: &str| Some(id("KEYLESS_ROW", row));
    let t = |op, old, new| ("ib_t".to_string(), op, old, new);
    let want = vec![
        // key (a)
        t(Op::Insert, None, k("1::int4")),
        t(Op::Update, k("1::int4"), k("1::int4")),
        // key (a, b), from the ALTER's message on
        t(Op::Insert, None, k("2::int4, 20::int4")),
        // one transaction: (a, b), then the key moves to (b) between two inserts
        t(Op::Insert, None, k("3::int4, 30::int4")),
        t(Op::Insert, None, k("40::int4")),
        // the rolled-back ALTER left the key at (b)
        t(Op::Update, k("40::int4"), k("41::int4")),
        t(Op::Delete, k("10::int4"), None),
        ("ib_e".into(), Op::Insert, None, k("'happy'::ib_mood")),
        ("ib_k".into(), Op::Insert, None, kl("1::int8, 'p'::text")),
        (
            "ib_k".into(),
            Op::Update,
            kl("1::int8, 'p'::text"),
            kl("1::int8, 'q'::text"),
        ),
        ("ib_k".into(), Op::Delete, kl("1::int8, 'q'::text"), None),
        t(Op::Truncate, None, None),
    ];
    assert_eq!(got, want);
    assert_eq!(
        schema_changes(&out),
        vec![vec!["ib_t".to_string()], vec!["ib_t".to_string()]],
        "two committed ALTERs, the rolled-back one wrote nothing"
    );

    sql("SELECT pg_drop_replication_slot('ib_slot');
         SELECT pgtrickle.disable_identity_messages();");
}

/// Every DDL of issue 20 item 5 writes the rows of the published tables it changed, and only
/// those: CREATE PUBLICATION, ALTER PUBLICATION ... ADD TABLES IN SCHEMA, a table created
/// under FOR ALL TABLES, ATTACH and DETACH PARTITION, a key added to a partitioned table
/// (every leaf), CREATE UNIQUE INDEX CONCURRENTLY, a leaf whose replica identity differs
/// from its root's (the root refused), and a standalone DROP INDEX (only the table whose key
/// it was).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn every_identity_changing_ddl_writes_what_it_touched() {
    use_database("rowid_cdc_in_band_cov", "cov_slot");
    sql("CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE SCHEMA cov_s;
         CREATE TABLE cov_a (id int8 PRIMARY KEY, v text);
         CREATE TABLE cov_b (id int8 PRIMARY KEY, u int8 NOT NULL, v text);
         CREATE UNIQUE INDEX cov_b_u ON cov_b (u);
         CREATE TABLE cov_c (k int8 NOT NULL, v text);
         CREATE TABLE cov_s.t1 (id int8 PRIMARY KEY);
         CREATE TABLE cov_p (k int8 NOT NULL, v text) PARTITION BY RANGE (k);
         CREATE TABLE cov_p1 PARTITION OF cov_p FOR VALUES FROM (0) TO (100);
         CREATE TABLE cov_p2 (k int8 NOT NULL, v text);
         CREATE PUBLICATION cov_pub FOR TABLE cov_a, cov_b, cov_p;
         CREATE PUBLICATION cov_root FOR TABLE cov_p WITH (publish_via_partition_root = true);
         SELECT pg_create_logical_replication_slot('cov_slot', 'pgoutput');");
    let initial = schemas_of(&["cov_a", "cov_b", "cov_p", "cov_p1"]);
    // One DDL per transaction (CREATE INDEX CONCURRENTLY cannot run in a block anyway).
    for ddl in [
        "CREATE PUBLICATION cov_pub2 FOR TABLE cov_c",
        "ALTER PUBLICATION cov_pub ADD TABLES IN SCHEMA cov_s",
        "ALTER TABLE cov_p ATTACH PARTITION cov_p2 FOR VALUES FROM (100) TO (200)",
        "ALTER TABLE cov_p ADD PRIMARY KEY (k)",
        "ALTER TABLE cov_p2 REPLICA IDENTITY FULL",
        "ALTER TABLE cov_p DETACH PARTITION cov_p2",
        "ALTER TABLE cov_p1 REPLICA IDENTITY FULL",
        "CREATE UNIQUE INDEX CONCURRENTLY cov_c_k ON cov_c (k)",
        "DROP INDEX cov_b_u",
        "ALTER TABLE cov_a DROP CONSTRAINT cov_a_pkey",
    ] {
        sql(&format!("{ddl};"));
    }
    let mut capture =
        Capture::new(initial, Lsn::ZERO, FlagBits::default()).with_identity_table(identity_table());
    let out = read_slot(&mut capture, "cov_slot", "cov_pub");
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        schema_changes(&out),
        vec![
            // CREATE PUBLICATION: its table
            names(&["cov_c"]),
            // ADD TABLES IN SCHEMA: the schema's tables
            names(&["t1"]),
            // ATTACH: the new leaf (the root's own identity is unchanged)
            names(&["cov_p2"]),
            // a key on the partitioned table: the root's and every leaf's identity
            names(&["cov_p", "cov_p1", "cov_p2"]),
            // a leaf's replica identity: the leaf, and its root (now refused)
            names(&["cov_p", "cov_p2"]),
            // DETACH: the root (refused no more)
            names(&["cov_p"]),
            // the other leaf: refused again
            names(&["cov_p", "cov_p1"]),
            // CREATE UNIQUE INDEX CONCURRENTLY: cov_c now has a key
            names(&["cov_c"]),
            // DROP INDEX cov_b_u touched nothing (cov_b's key is its primary key), then
            // DROP CONSTRAINT: only cov_a
            names(&["cov_a"]),
        ]
    );
    let root = capture
        .schemas()
        .find(|s| s.relname == "cov_p")
        .cloned()
        .expect("the root's schema");
    let refusal = root
        .identity
        .expect_err("a root whose leaves differ is refused");
    assert!(refusal.message.contains("cov_p1"), "{}", refusal.message);
    let c = capture
        .schemas()
        .find(|s| s.relname == "cov_c")
        .and_then(|s| s.identity.clone().ok())
        .expect("cov_c's identity");
    assert_eq!(c.index.as_deref(), Some("public.cov_c_k"));
    sql("SELECT pg_drop_replication_slot('cov_slot');
         SELECT pgtrickle.disable_identity_messages();");
}

/// Issue 36 item 11: `REINDEX INDEX CONCURRENTLY` gives the key's index a new OID; before
/// PostgreSQL 17 it fires no event trigger, so the row keeps the old OID, and a later `DROP
/// INDEX` of the (new) index matched no row: the table kept a key it no longer had. A DROP now
/// also writes the rows whose recorded key index no longer exists. Here: a unique index that is
/// the registry's key (no primary key), reindexed concurrently, then dropped.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_key_index_reindexed_concurrently_then_dropped_is_followed() {
    use_database("rowid_cdc_in_band_reindex", "reindex_slot");
    sql("CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE ri (k int8 NOT NULL, v text);
         CREATE UNIQUE INDEX ri_k ON ri (k);
         CREATE PUBLICATION ri_pub FOR TABLE ri;");
    let before = schemas_of(&["ri"]).remove(0);
    assert_eq!(
        before
            .identity
            .as_ref()
            .ok()
            .and_then(|d| d.index.as_deref()),
        Some("public.ri_k"),
        "the unique index is the key"
    );
    for ddl in ["REINDEX INDEX CONCURRENTLY ri_k", "DROP INDEX ri_k"] {
        sql(&format!("{ddl};"));
    }
    let written =
        one("SELECT schema FROM pgtrickle.identity_schemas WHERE relid = 'ri'::regclass;");
    let written = match SchemaMessage::parse(written.as_bytes()).unwrap() {
        SchemaMessage::Schema(s) => s,
        other => panic!("{other:?}"),
    };
    let now = schemas_of(&["ri"]).remove(0);
    assert!(
        now.matches_written(&written),
        "the row is not the schema now: {written:?} vs {now:?}"
    );
    assert_eq!(
        written.identity.as_ref().map(|d| d.domain).ok(),
        Some(rowid_codec::Domain::KeylessRow)
    );
    sql("SELECT pgtrickle.disable_identity_messages();");
}

/// The event triggers take no lock on a table whose identity schema row stays: with a lock
/// queued on a published table (a reader holds it, an ALTER waits), a DDL elsewhere in the
/// database goes through at once. Reading `pg_publication_tables` or `pg_partition_tree()`
/// there (as they did) opens every published table or partition, so every DDL of the
/// database waited behind that queue (PostgreSQL 16 on), and a client whose own DDL waited
/// while it held a published table deadlocked: rowid-cdc's snapshot with a replica in the
/// same database. A publication DDL does wait for the tables it may publish now, as
/// PostgreSQL's own `FOR TABLE` does (issue 36 item 12: it locks them before reading their
/// schemas); `FOR ALL TABLES` publishes the queued table.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_ddl_waits_for_no_lock_queued_on_a_published_table() {
    let db = database("rowid_cdc_lock_queue", "lock_queue_none");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE t (id int PRIMARY KEY);
         CREATE TABLE pt (id int PRIMARY KEY) PARTITION BY RANGE (id);
         CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (10);
         CREATE TABLE pt2 PARTITION OF pt FOR VALUES FROM (10) TO (20);
         CREATE PUBLICATION lq FOR TABLE t, pt;",
    )
    .unwrap();
    // A reader holds t and pt2 until it is cancelled; an ALTER of t and an exclusive lock of
    // pt2 (a partition takes no ADD COLUMN of its own) queue behind it.
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || {
            let _ = db.run(
                "BEGIN; SELECT count(*) FROM t, pt2; SELECT pg_sleep(60) /* lock queue reader */;",
            );
        })
    };
    let waiting = |sql: &str| {
        let db = db.clone();
        let sql = sql.to_string();
        std::thread::spawn(move || db.run(&sql).map(|_| ()))
    };
    let until = |query: &str, expected: &str| {
        let t = std::time::Instant::now();
        while db.run(query).unwrap().trim() != expected {
            assert!(t.elapsed().as_secs() < 30, "{query} never gave {expected}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    until(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%lock queue reader%' \
         AND wait_event = 'PgSleep';",
        "1",
    );
    let alters = [
        waiting("ALTER TABLE t ADD COLUMN v int;"),
        waiting("BEGIN; LOCK TABLE pt2 IN ACCESS EXCLUSIVE MODE; COMMIT;"),
    ];
    until(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock' \
         AND relation IN ('t'::regclass, 'pt2'::regclass);",
        "2",
    );
    // Each in its own statement: the first to wait fails with its name.
    let ddls = [
        "CREATE TABLE unrelated (x int);",
        "CREATE PUBLICATION unrelated FOR TABLE unrelated;",
        "COMMENT ON TABLE pt IS 'the partitioned root';",
        "CREATE INDEX pt1_id ON pt1 (id);",
    ];
    let everything =
        db.run("SET lock_timeout = '1s'; CREATE PUBLICATION everything FOR ALL TABLES;");
    let results: Vec<(&str, Result<String, String>)> = ddls
        .iter()
        .map(|ddl| (*ddl, db.run(&format!("SET lock_timeout = '3s'; {ddl}"))))
        .collect();
    db.run(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
         WHERE query LIKE '%lock queue reader%' AND pid <> pg_backend_pid();",
    )
    .unwrap();
    reader.join().unwrap();
    for alter in alters {
        alter.join().unwrap().unwrap();
    }
    for (ddl, result) in results {
        let first_line = result.map_err(|e| e.lines().next().unwrap_or_default().to_string());
        assert!(first_line.is_ok(), "{ddl} waited: {first_line:?}");
    }
    assert!(
        everything
            .as_ref()
            .is_err_and(|e| e.contains("canceling statement due to lock timeout")),
        "FOR ALL TABLES did not wait for the table it publishes: {everything:?}"
    );
    db.run("SELECT pgtrickle.disable_identity_messages();")
        .unwrap();
}
