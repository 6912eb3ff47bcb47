//! The replica sink against a live server (spec/replica.md): `rowid-cdc --create-slot
//! --snapshot --sink replica:DSN` keeps, in another database, a storage table per published
//! table, each equal to its source as a multiset with every stored `__pgt_row_id` equal to
//! `encode_row_id_v2` of its row; one table per index class (a bounded key: the direct UNIQUE
//! index as replica identity; a text key: the probe expression; a bounded keyless table: a
//! direct index; an unbounded keyless one: the probe), rows from before the slot, a TOASTed
//! column left unchanged by updates and key moves, one identity changed several times in one
//! transaction, keyless duplicates of which exactly one is deleted or updated, TRUNCATE
//! followed by inserts, and the consumer SIGKILLed in the middle and restarted. Then a
//! storage table that no longer equals its source stops the sink, naming the table, the
//! operation and the identity's fingerprint, never its bytes, and applies nothing of that
//! transaction; `--repair` empties that storage table and reads its source into it again in
//! chunks while streaming (killed and restarted during the repair), and it equals its source
//! again.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Cdc, Dir, DropSlot, Running, database, one, wait_active, wait_for};
use rowid_testkit::psql::Psql;

const SLOT: &str = "rowid_replica";

/// The source tables: name, columns, identity expression for `encode_row_id_v2`.
const TABLES: &[(&str, &str, &str)] = &[
    ("k", "id, v, doc, m", "'SCAN_KEY', ROW(id)"),
    ("t", "name, v", "'SCAN_KEY', ROW(name)"),
    ("kb", "a, b", "'KEYLESS_ROW', ROW(a, b)"),
    ("kl", "a, b", "'KEYLESS_ROW', ROW(a, b)"),
];

fn setup(src: &Psql) {
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE k (id int8 PRIMARY KEY, v int4, doc text, m mood);
         ALTER TABLE k ALTER COLUMN doc SET STORAGE EXTERNAL;
         CREATE TABLE t (name text PRIMARY KEY, v int4);
         CREATE TABLE kb (a int4, b int4);
         ALTER TABLE kb REPLICA IDENTITY FULL;
         CREATE TABLE kl (a int4, b text);
         ALTER TABLE kl REPLICA IDENTITY FULL;
         -- Rows from before the slot.
         INSERT INTO k SELECT g, g, repeat(md5(g::text), 300), 'ok' FROM generate_series(1, 20) g;
         INSERT INTO t SELECT repeat('n', 70) || g, g FROM generate_series(1, 5) g;
         INSERT INTO kb VALUES (1, 1), (1, 1), (2, 2);
         INSERT INTO kl VALUES (1, 'x'), (1, 'x'), (NULL, NULL);
         CREATE PUBLICATION p FOR TABLE k, t, kb, kl;",
    )
    .unwrap();
}

/// The workload after the slot, transaction by transaction.
const WORKLOAD: &[&str] = &[
    // Updates leaving the TOASTed doc alone (the stream does not send it).
    "UPDATE k SET v = v + 100;",
    // A key move leaving doc alone, and one identity changed several times.
    "BEGIN; UPDATE k SET id = 1001 WHERE id = 1; UPDATE k SET v = 7 WHERE id = 2;
     UPDATE k SET v = 8 WHERE id = 2; DELETE FROM k WHERE id = 3;
     INSERT INTO k VALUES (3, 33, 'short', 'sad'); UPDATE k SET id = 4003 WHERE id = 3;
     INSERT INTO k VALUES (3, 34, 'again', 'happy'); COMMIT;",
    // Keys longer than the probe prefix: moved, deleted, inserted.
    "BEGIN; UPDATE t SET name = repeat('m', 80) WHERE v = 1; DELETE FROM t WHERE v = 2;
     INSERT INTO t VALUES (repeat('n', 70) || '2', 22); UPDATE t SET v = v + 1; COMMIT;",
    // Keyless duplicates: exactly one deleted, one of two updated.
    "DELETE FROM kb WHERE ctid = (SELECT ctid FROM kb WHERE a = 1 LIMIT 1);",
    "INSERT INTO kb VALUES (1, 1), (3, 3), (3, 3);",
    "UPDATE kb SET b = 9 WHERE ctid = (SELECT ctid FROM kb WHERE a = 3 LIMIT 1);",
    "BEGIN; INSERT INTO kl VALUES (2, 'y'), (2, 'y'); DELETE FROM kl WHERE a IS NULL;
     UPDATE kl SET b = 'z' WHERE ctid = (SELECT ctid FROM kl WHERE a = 2 LIMIT 1); COMMIT;",
    // TRUNCATE, then rows again, in one transaction.
    "BEGIN; INSERT INTO kb VALUES (5, 5); TRUNCATE kb; INSERT INTO kb VALUES (6, 6), (6, 6); COMMIT;",
    "UPDATE k SET doc = 'replaced' WHERE id = 5;",
];

/// The rows of `table` in `db`, sorted, each as the start of its text and the md5 of all of
/// it (a TOASTed value would make a failure unreadable).
fn rows(db: &Psql, relation: &str, columns: &str) -> String {
    db.run(&format!(
        "SELECT left(r, 40) || ' md5 ' || md5(r) FROM \
         (SELECT ({columns})::text AS r FROM {relation}) AS x ORDER BY r;"
    ))
    .unwrap()
}

/// Waits until the storage of `k` holds the row with id `id`, failing as soon as `running`
/// ended (the fresh machine's failure waited out a minute for a consumer that had stopped).
fn wait_for_k(target: &Psql, id: i64, running: &mut Running) {
    wait_for(
        target,
        &format!("SELECT count(*) FROM public.k WHERE id = {id};"),
        "1",
        running,
        &format!("row {id} of k never arrived"),
    );
}

fn assert_equal(src: &Psql, target: &Psql) {
    for (table, columns, identity) in TABLES {
        assert_eq!(
            rows(target, &format!("public.{table}"), columns),
            rows(src, table, columns),
            "{table}: the storage is its source, as a multiset"
        );
        assert_eq!(
            one(
                target,
                &format!(
                    "SELECT count(*) FROM public.{table} \
                     WHERE \"__pgt_row_id\" IS DISTINCT FROM pgtrickle.encode_row_id_v2({identity});"
                )
            ),
            "0",
            "{table}: every stored identity is encode_row_id_v2 of its row"
        );
    }
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_replica_equals_its_sources_through_every_index_class() {
    let src = database("rowid_cdc_replica_src", SLOT);
    let _drop = DropSlot(&src, SLOT);
    let target = Psql::fresh_database("rowid_cdc_replica_dst").unwrap();
    target
        .run("CREATE EXTENSION pg_trickle_ext; CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');")
        .unwrap();
    setup(&src);
    let dir = Dir::new("replica");
    let cdc = Cdc {
        dsn: src.dsn(),
        slot: SLOT,
        publication: "p",
        dir: &dir,
    };
    let sink = format!("replica:{}", target.dsn());
    let run = |extra: &[&str]| Running(cdc.command_into(&sink, extra).spawn().unwrap());

    let mut first = run(&["--create-slot", "--snapshot"]);
    wait_active(&src, SLOT);
    let (half, rest) = WORKLOAD.split_at(4);
    for txn in half {
        src.run(txn).unwrap();
    }
    src.run("INSERT INTO k VALUES (5000, 0, 'marker', 'ok');")
        .unwrap();
    wait_for_k(&target, 5000, &mut first);
    // Killed between transactions, and more written while it is down.
    drop(first);
    for txn in rest {
        src.run(txn).unwrap();
    }
    src.run("INSERT INTO k VALUES (5001, 0, 'marker', 'ok');")
        .unwrap();
    let mut second = run(&[]);
    wait_for_k(&target, 5001, &mut second);
    assert_equal(&src, &target);

    // The index plans, in the target's catalog.
    assert_eq!(
        target
            .run(
                "SELECT c.relname, i.indisunique, pg_get_indexdef(i.indexrelid) LIKE '%row_probe_v1%', \
                 i.indisreplident, c.relreplident FROM pg_index i \
                 JOIN pg_class c ON c.oid = i.indrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = 'public' ORDER BY 1;"
            )
            .unwrap(),
        "k|t|f|t|i\nkb|f|f|f|f\nkl|f|t|f|f\nt|f|t|f|f\n"
    );
    matching_uses_the_index(&target);

    // A storage that no longer equals its source: an update of a row it lacks stops the sink.
    target.run("DELETE FROM public.k WHERE id = 6;").unwrap();
    let position_before = one(
        &target,
        "SELECT commit_lsn FROM pgtrickle_replica.__pgt_replica_position;",
    );
    src.run("BEGIN; INSERT INTO k VALUES (7000, 0, 'x', 'ok'); UPDATE k SET v = -1 WHERE id = 6; COMMIT;")
        .unwrap();
    let (ok, err) = second.finish(Duration::from_secs(60));
    assert!(!ok, "the sink stopped: {err}");
    assert!(err.contains("public.k"), "names the table: {err}");
    assert!(err.contains("an update"), "names the operation: {err}");
    assert!(
        err.contains("len=17 fp="),
        "names the identity by fingerprint: {err}"
    );
    let id6 = one(
        &src,
        "SELECT encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(6::int8)), 'hex');",
    );
    assert!(!err.contains(&id6), "never the identity's bytes: {err}");
    assert_eq!(
        one(&target, "SELECT count(*) FROM public.k WHERE id = 7000;"),
        "0",
        "nothing of the transaction was applied"
    );
    assert_eq!(
        one(
            &target,
            "SELECT commit_lsn FROM pgtrickle_replica.__pgt_replica_position;"
        ),
        position_before
    );
    assert!(err.contains("--repair public.k"), "names the repair: {err}");

    // --repair: the storage emptied and read again in chunks while streaming, the failed
    // transaction and those after it applied. A stray row the source never had goes too.
    target
        .run("INSERT INTO public.k SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(9999::int8)), 9999, 0, 'stray', 'ok';")
        .unwrap();
    src.run("UPDATE k SET v = v + 1 WHERE id BETWEEN 10 AND 12; INSERT INTO k VALUES (7001, 1, 'y', 'sad');")
        .unwrap();
    let mut repairing = run(&["--repair", "public.k", "--snapshot-chunk", "7"]);
    src.run("UPDATE k SET v = v + 1 WHERE id = 15; DELETE FROM k WHERE id = 16;")
        .unwrap();
    // Killed once its first chunk emptied the storage (the stray row is gone), restarted
    // without --repair: the chunks go on from the last one delivered.
    wait_for(
        &target,
        "SELECT count(*) FROM public.k WHERE id = 9999;",
        "0",
        &mut repairing,
        "the repair never emptied the storage",
    );
    drop(repairing);
    src.run("UPDATE k SET doc = 'after the kill' WHERE id = 20; INSERT INTO k VALUES (5002, 0, 'marker', 'ok');")
        .unwrap();
    let mut last = run(&["--snapshot-chunk", "7"]);
    wait_for_k(&target, 5002, &mut last);
    assert_equal(&src, &target);
    assert_eq!(
        one(&target, "SELECT count(*) FROM public.k WHERE id = 9999;"),
        "0",
        "the stray row is gone"
    );
    drop(last);
    // Only a replica's storage is repaired, and only a table that can be read in chunks.
    let out = cdc.run(&["--repair", "public.k"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs --sink replica:"),
        "{err}"
    );
    let out = cdc
        .command_into(&sink, &["--repair", "public.kl"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("--repair public.kl: cannot be read in chunks")
            && err.contains("starting the replica over"),
        "{err}"
    );
}

/// Every statement the sink matches storage rows with (the registry's apply steps; not the
/// search for the change at fault, which runs once, after a failure), for every storage
/// table the target records,
/// planned by the target's server: each reaches the storage through its identity index
/// (`__pgt_row_id_<source relid>`, a direct or a probe expression index) and never scans it.
/// Sequential scans are disabled so that the plan shows whether the matching predicate can
/// use the index at all (these tables are small enough for a scan to win otherwise); a
/// predicate the index cannot serve still gets a Seq Scan, and fails here. One exception: a
/// `NOT EXISTS` guard (is the identity an update moves to already stored?) may be planned as
/// a hashed SubPlan, one scan of the storage for the whole statement, which PostgreSQL 18
/// chooses over a probe per change for a storage this small whatever `enable_seqscan` says
/// (its choice between the two ignores disabled nodes); with a storage much larger than the
/// segment it probes the index per change, and the change itself is matched through the
/// index either way.
fn matching_uses_the_index(target: &Psql) {
    use rowid_codec::Domain;
    use rowid_registry::Uniqueness;
    use rowid_registry::replica::{
        Apply, SHAPE_QUERY, Storage, TABLES, check_shape, class_from_name, index_name,
    };
    use rowid_registry::schema_message::SchemaMessage;
    use rowid_registry::sql::QualifiedName;

    let recorded = target
        .run(&format!(
            "SELECT s.source_relid, c.relname, c.oid, s.index_class, s.identity_schema \
             FROM pgtrickle_replica.{TABLES} s JOIN pg_class c ON c.oid = s.storage::regclass \
             ORDER BY c.relname;"
        ))
        .unwrap();
    let mut checked = Vec::new();
    for line in recorded.lines() {
        let f: Vec<&str> = line.splitn(5, '|').collect();
        let (source_relid, relname, oid, class) = (f[0], f[1], f[2], f[3]);
        let Ok(SchemaMessage::Schema(schema)) = SchemaMessage::parse(f[4].as_bytes()) else {
            panic!("{relname}: the recorded identity schema parses: {}", f[4]);
        };
        let shape: Vec<(String, String, Option<String>)> = target
            .run(&format!(
                "PREPARE shape(oid) AS {SHAPE_QUERY}; EXECUTE shape({oid});"
            ))
            .unwrap()
            .lines()
            .map(|l| {
                let c: Vec<&str> = l.splitn(3, '|').collect();
                let comment = (!c[2].is_empty()).then(|| c[2].to_string());
                (c[0].to_string(), c[1].to_string(), comment)
            })
            .collect();
        let storage = Storage {
            table: QualifiedName::new("public", relname),
            source_relid: source_relid.parse().unwrap(),
            class: class_from_name(class).unwrap(),
            uniqueness: match schema.identity.as_ref().map(|d| d.domain) {
                Ok(Domain::KeylessRow) => Uniqueness::Multiset,
                _ => Uniqueness::Unique,
            },
            columns: check_shape(relname, &shape).unwrap(),
        };
        let apply = Apply::new(&storage);
        let index = index_name(storage.source_relid);
        for sql in apply.steps(None).into_iter().map(|step| step.sql) {
            let plan = target
                .run(&format!(
                    "SET enable_seqscan = off; {}; EXPLAIN (COSTS OFF) {sql};",
                    apply.delta_table()
                ))
                .unwrap();
            let scans_storage = seq_scans_outside_hashed_subplans(&plan, relname);
            assert!(
                plan.contains(&index) && !scans_storage,
                "public.{relname} ({class}): the statement matches through {index}:\n{sql}\n{plan}"
            );
        }
        checked.push(format!("{relname}:{class}"));
    }
    assert_eq!(
        checked,
        ["k:direct_unique", "kb:direct", "kl:probe", "t:probe"],
        "every index class checked"
    );
}

/// Whether `plan` (EXPLAIN's text) scans `relname` sequentially other than inside a hashed
/// SubPlan (a block headed `SubPlan N` or `hashed SubPlan N` whose name some expression of
/// the plan refers to as `hashed SubPlan N`).
fn seq_scans_outside_hashed_subplans(plan: &str, relname: &str) -> bool {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut hashed_block: Option<usize> = None;
    for line in plan.lines() {
        let text = line.trim_start_matches([' ', '-', '>']);
        if hashed_block.is_some_and(|at| indent(line) <= at) {
            hashed_block = None;
        }
        let subplan = text.trim_start_matches("hashed ");
        if hashed_block.is_none()
            && subplan.starts_with("SubPlan ")
            && plan.contains(&format!("hashed {subplan}"))
        {
            hashed_block = Some(indent(line));
            continue;
        }
        let scans = text
            .strip_prefix("Seq Scan on ")
            .is_some_and(|rest| rest.split(' ').next() == Some(relname));
        if scans && hashed_block.is_none() {
            return true;
        }
    }
    false
}

#[test]
fn a_seq_scan_is_found_outside_hashed_subplans_only() {
    let hashed = "Update on t\n  ->  Nested Loop\n        ->  Index Scan using i on t\n        \
                  ->  Seq Scan on d\n              Filter: (NOT (hashed SubPlan 2))\n              \
                  SubPlan 2\n                ->  Seq Scan on t t_1\n";
    assert!(!seq_scans_outside_hashed_subplans(hashed, "t"));
    let per_row = hashed.replace("hashed SubPlan 2", "SubPlan 2");
    assert!(seq_scans_outside_hashed_subplans(&per_row, "t"));
    assert!(seq_scans_outside_hashed_subplans(
        "Delete on t\n  ->  Seq Scan on t\n",
        "t"
    ));
    assert!(!seq_scans_outside_hashed_subplans(
        "Delete on t\n  ->  Seq Scan on tt\n",
        "t"
    ));
}

/// The index of storage `public.r`: unique, probe, replica identity; and the table's
/// replica identity setting.
fn r_index(target: &Psql) -> String {
    one(
        target,
        "SELECT i.indisunique || '|' || (pg_get_indexdef(i.indexrelid) LIKE '%row_probe_v1%') \
         || '|' || i.indisreplident || '|' || c.relreplident::text FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indrelid WHERE c.oid = 'public.r'::regclass;",
    )
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_changed_key_rebuilds_every_stored_identity_and_the_index() {
    let slot = "rowid_replica_key";
    let src = database("rowid_cdc_replica_key_src", slot);
    let _drop = DropSlot(&src, slot);
    let target = Psql::fresh_database("rowid_cdc_replica_key_dst").unwrap();
    target.run("CREATE EXTENSION pg_trickle_ext;").unwrap();
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE r (id int8 PRIMARY KEY, code text NOT NULL, v int4);
         INSERT INTO r SELECT g, 'code-' || g, g FROM generate_series(1, 50) g;
         CREATE PUBLICATION p FOR TABLE r;",
    )
    .unwrap();
    let dir = Dir::new("replica-key");
    let cdc = Cdc {
        dsn: src.dsn(),
        slot,
        publication: "p",
        dir: &dir,
    };
    let sink = format!("replica:{}", target.dsn());
    let mut running = Running(
        cdc.command_into(&sink, &["--create-slot", "--snapshot"])
            .spawn()
            .unwrap(),
    );
    wait_active(&src, slot);
    let applied = |v: i32, running: &mut Running| {
        wait_for(
            &target,
            &format!("SELECT count(*) FROM public.r WHERE v = {v};"),
            "1",
            running,
            &format!("the change setting v = {v} never arrived"),
        )
    };
    let check = |identity: &str| {
        assert_eq!(
            rows(&target, "public.r", "id, code, v"),
            rows(&src, "r", "id, code, v")
        );
        assert_eq!(
            one(
                &target,
                &format!(
                    "SELECT count(*) FROM public.r WHERE \"__pgt_row_id\" \
                     IS DISTINCT FROM pgtrickle.encode_row_id_v2({identity});"
                )
            ),
            "0",
            "every identity rebuilt as {identity}"
        );
    };
    src.run("UPDATE r SET v = 1001 WHERE id = 1;").unwrap();
    applied(1001, &mut running);
    assert_eq!(
        r_index(&target),
        "true|false|true|i",
        "a bounded key: the direct UNIQUE index"
    );
    check("'SCAN_KEY', ROW(id)");

    // The key moves to the text column: unbounded, so the probe index; the change in the
    // same transaction is applied under the new identity.
    src.run(
        "BEGIN; ALTER TABLE r DROP CONSTRAINT r_pkey, ADD PRIMARY KEY (code);
         UPDATE r SET v = 1002, id = 2000 WHERE code = 'code-2'; COMMIT;",
    )
    .unwrap();
    applied(1002, &mut running);
    assert_eq!(
        r_index(&target),
        "false|true|false|f",
        "a text key: the probe expression"
    );
    check("'SCAN_KEY', ROW(code)");

    // No key at all: every column, a multiset (duplicates allowed, one deleted).
    src.run(
        "ALTER TABLE r REPLICA IDENTITY FULL; ALTER TABLE r DROP CONSTRAINT r_pkey;
         INSERT INTO r VALUES (7, 'dup', 1003), (7, 'dup', 1003), (8, 'dup', 1004);
         DELETE FROM r WHERE ctid = (SELECT ctid FROM r WHERE code = 'dup' AND v = 1003 LIMIT 1);",
    )
    .unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.r WHERE code = 'dup';",
        "2",
        &mut running,
        "the keyless rows",
    );
    assert_eq!(
        r_index(&target),
        "false|true|false|f",
        "keyless with a text column: the probe"
    );
    check("'KEYLESS_ROW', ROW(id, code, v)");

    // A bounded key again: the direct UNIQUE index, the replica identity.
    src.run(
        "DELETE FROM r WHERE code = 'dup'; ALTER TABLE r ADD PRIMARY KEY (id);
         ALTER TABLE r REPLICA IDENTITY DEFAULT; UPDATE r SET v = 1005 WHERE id = 3;",
    )
    .unwrap();
    applied(1005, &mut running);
    assert_eq!(r_index(&target), "true|false|true|i");
    check("'SCAN_KEY', ROW(id)");
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_type_the_target_lacks_is_refused_by_column_and_type() {
    let slot = "rowid_replica_type";
    let src = database("rowid_cdc_replica_type_src", slot);
    let _drop = DropSlot(&src, slot);
    let target = Psql::fresh_database("rowid_cdc_replica_type_dst").unwrap();
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE TABLE e (id int8 PRIMARY KEY, m mood);
         INSERT INTO e VALUES (1, 'happy');
         CREATE PUBLICATION p FOR TABLE e;",
    )
    .unwrap();
    let dir = Dir::new("replica-type");
    let cdc = Cdc {
        dsn: src.dsn(),
        slot,
        publication: "p",
        dir: &dir,
    };
    let out = {
        let mut c = cdc.command_into(
            &format!("replica:{}", target.dsn()),
            &["--create-slot", "--snapshot"],
        );
        c.output().unwrap()
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {err}");
    assert!(
        err.contains("public.e") && err.contains("\"m\"") && err.contains("public.mood"),
        "names the table, the column and the type: {err}"
    );
    assert_eq!(
        one(
            &target,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'e';"
        ),
        "0",
        "nothing created"
    );
}

/// A source with table `w` (10 rows) kept in a fresh target by a running replica sink, the
/// snapshot applied. Dropped: the sink killed, then its slot dropped.
struct ReplicaOfW {
    src: Psql,
    target: Psql,
    slot: String,
    running: std::cell::RefCell<Option<Running>>,
    _dir: Dir,
}

impl ReplicaOfW {
    /// `name` tells the databases, slot and directory apart; `target_setup` runs in the
    /// target first.
    fn start(name: &str, target_setup: &str) -> ReplicaOfW {
        let slot = format!("rowid_replica_{name}");
        let src = database(&format!("rowid_cdc_replica_{name}_src"), &slot);
        let target = Psql::fresh_database(&format!("rowid_cdc_replica_{name}_dst")).unwrap();
        target.run(target_setup).unwrap();
        src.run(
            "CREATE EXTENSION pg_trickle_ext;
             SELECT pgtrickle.enable_identity_messages();
             CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
             CREATE TYPE pair AS (a int4, b text);
             CREATE TABLE w (id int8 PRIMARY KEY, v int4);
             INSERT INTO w SELECT g, g FROM generate_series(1, 10) g;
             CREATE PUBLICATION p FOR TABLE w;",
        )
        .unwrap();
        let dir = Dir::new(&format!("replica-{name}"));
        let cdc = Cdc {
            dsn: src.dsn(),
            slot: &slot,
            publication: "p",
            dir: &dir,
        };
        let mut running = Running(
            cdc.command_into(
                &format!("replica:{}", target.dsn()),
                &["--create-slot", "--snapshot"],
            )
            .spawn()
            .unwrap(),
        );
        wait_active(&src, &slot);
        wait_for(
            &target,
            "SELECT count(*) FROM public.w;",
            "10",
            &mut running,
            "the snapshot of w",
        );
        ReplicaOfW {
            src,
            target,
            slot,
            running: std::cell::RefCell::new(Some(running)),
            _dir: dir,
        }
    }

    /// Waits for the sink to stop: whether it succeeded, and its stderr.
    fn finish(&mut self) -> (bool, String) {
        self.running
            .borrow_mut()
            .take()
            .unwrap()
            .finish(Duration::from_secs(60))
    }

    /// Waits until `sql` on the target prints `expected`, while the sink runs.
    fn wait(&self, sql: &str, expected: &str, what: &str) {
        let mut running = self.running.borrow_mut();
        wait_for(&self.target, sql, expected, running.as_mut().unwrap(), what);
    }
}

impl Drop for ReplicaOfW {
    fn drop(&mut self) {
        drop(self.running.borrow_mut().take());
        drop(DropSlot(&self.src, &self.slot));
    }
}

/// A DDL that gives the existing rows values no WAL record carries stops the sink, naming the
/// table and the column or the rewrite, and the storage keeps what it could vouch for: a
/// retype with a USING conversion, a rewrite that keeps the shape (each rewrite is a message
/// of its own, format 5), a column added with a volatile default (a rewrite), and a column
/// added with a default of a type without a binary send form (`aclitem`: its rows' value is in
/// no message, format 7; before it the DDL itself failed).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_rewrite_no_wal_record_carries_stops_the_sink_by_name() {
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "retype",
            "ALTER TABLE w ALTER COLUMN v TYPE int8 USING v * 100;",
            &["retyped column \"v\""],
        ),
        (
            "using",
            "ALTER TABLE w ALTER COLUMN v TYPE int4 USING v + 1;",
            &["had its rows rewritten"],
        ),
        (
            "volatile",
            "ALTER TABLE w ADD COLUMN r float8 DEFAULT random();",
            &["gained column \"r\"", "rewrote the table"],
        ),
        (
            "unsendable",
            "ALTER TABLE w ADD COLUMN a aclitem DEFAULT 'postgres=r/postgres';",
            &["new column \"a\"", "aclitem", "no binary send form"],
        ),
    ];
    for (name, ddl, expected) in cases {
        let mut w = ReplicaOfW::start(name, "SELECT 1;");
        let src = &w.src;
        src.run(&format!("{ddl} UPDATE w SET id = id + 100 WHERE id = 1;"))
            .unwrap();
        let (ok, err) = w.finish();
        assert!(!ok, "{name}: the sink stopped: {err}");
        assert!(
            err.contains("public.w") && expected.iter().all(|e| err.contains(e)),
            "{name}: names the table and what it cannot follow: {err}"
        );
        assert_eq!(
            one(&w.target, "SELECT sum(v) || ' ' || sum(id) FROM public.w;"),
            "55 55",
            "{name}: the storage kept what it could vouch for"
        );
    }
}

/// Columns added to a table with rows, without a rewrite: the stored rows get the value the
/// source's rows hold (identity schema messages format 5: a constant, `now()` at the DDL, an
/// enum, a composite of the source's types, an empty text; NULL without a default), also for
/// rows inserted earlier in the DDL's own transaction, and the rows after it carry their own.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_column_added_to_rows_holds_the_value_they_hold_at_the_source() {
    let w = ReplicaOfW::start(
        "added",
        "CREATE EXTENSION pg_trickle_ext; CREATE TABLE filler (x int);
         CREATE TYPE public.pair AS (a int4, b text);
         CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');",
    );
    let (src, target) = (&w.src, &w.target);
    src.run(
        "ALTER TABLE w ADD COLUMN c int4 NOT NULL DEFAULT 5, ADD COLUMN t text DEFAULT '',
                       ADD COLUMN n int8;
         BEGIN;
         INSERT INTO w (id, v) VALUES (11, 11);
         ALTER TABLE w ADD COLUMN at timestamptz DEFAULT now(),
                       ADD COLUMN m mood DEFAULT 'happy', ADD COLUMN p pair DEFAULT ROW(7, 'x');
         INSERT INTO w VALUES (12, 12, 6, 'six', 66, '2000-01-01', 'sad', ROW(8, 'y'));
         COMMIT;
         UPDATE w SET v = -v WHERE id = 2;
         INSERT INTO w (id) VALUES (5000);",
    )
    .unwrap();
    w.wait(
        "SELECT count(*) FROM public.w WHERE id = 5000;",
        "1",
        "the rows after the DDL",
    );
    let columns = "id, v, c, t, n, at, m, p";
    assert_eq!(
        rows(target, "public.w", columns),
        rows(src, "w", columns),
        "the storage is its source"
    );
    assert_eq!(
        one(
            target,
            "SELECT count(*) FROM public.w WHERE c = 5 AND t = '' AND n IS NULL AND m = 'happy' \
             AND (p).a = 7;"
        ),
        "12",
        "the ten rows from before the columns, the one inserted before them and 5000"
    );
    assert_eq!(
        one(
            target,
            "SELECT count(*) FROM public.w WHERE \"__pgt_row_id\" IS DISTINCT FROM \
             pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id));"
        ),
        "0"
    );
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn user_types_inside_arrays_and_composites_cross_databases() {
    let slot = "rowid_replica_oids";
    let src = database("rowid_cdc_replica_oids_src", slot);
    let _drop = DropSlot(&src, slot);
    let target = Psql::fresh_database("rowid_cdc_replica_oids_dst").unwrap();
    // Created in another order, so every OID differs from the source's.
    target
        .run(
            "CREATE EXTENSION pg_trickle_ext;
             CREATE TABLE filler (x int); CREATE TYPE public.pair AS (a int4, b text);
             CREATE TYPE public.mood AS ENUM ('sad', 'happy');",
        )
        .unwrap();
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE TYPE pair AS (a int4, b text);
         CREATE TABLE u (id int8 PRIMARY KEY, moods mood[], p pair, ps pair[]);
         INSERT INTO u VALUES (1, '{happy,sad}', ROW(1, 'x'), ARRAY[ROW(2, 'y')::pair]);
         CREATE PUBLICATION p FOR TABLE u;",
    )
    .unwrap();
    let dir = Dir::new("replica-oids");
    let cdc = Cdc {
        dsn: src.dsn(),
        slot,
        publication: "p",
        dir: &dir,
    };
    let mut running = Running(
        cdc.command_into(
            &format!("replica:{}", target.dsn()),
            &["--create-slot", "--snapshot"],
        )
        .spawn()
        .unwrap(),
    );
    wait_active(&src, slot);
    src.run("INSERT INTO u VALUES (2, '{sad}', ROW(3, 'z'), NULL);")
        .unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.u;",
        "2",
        &mut running,
        "the second row of u",
    );
    assert_eq!(
        rows(&target, "public.u", "id, moods, p, ps"),
        rows(&src, "u", "id, moods, p, ps")
    );
}
