//! The replica sink in the cases issue 33 found it inexact, wedged or refusing what it should
//! take, each against a live server: keyless rows that are equal but spelt differently (each
//! kept as written), a `NOT NULL` domain column (deletes), a table renamed and then changed
//! (its storage follows), a replica or a change buffer restored behind its state file
//! (refused), publications
//! that cannot keep a replica equal (refused by name; other sinks told), a new slot into a
//! replica schema that holds another run's storage (refused by name), two sinks starting into
//! one schema at once (both start), a storage table locked or a statement cancelled while
//! the target's defaults would time it out (waited for and retried, not reported as
//! divergence), an enum label renamed under a key (every stored identity computed again,
//! once the replica's database has the new label too), and `CREATE TABLE ... AS` under
//! `FOR ALL TABLES` (its rows come before its identity schema).
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cdc, Dir, DropSlot, Running, database, one, wait_for, wait_free};
use rowid_testkit::psql::Psql;

/// A source database `rowid_cdc_<name>` (`setup` run after identity messages are on) and a
/// target database `rowid_cdc_<name>_target` (`target_setup` run there), and a scratch
/// directory.
fn pair(name: &str, slot: &str, setup: &str, target_setup: &str) -> (Psql, Psql, Dir) {
    let src = database(&format!("rowid_cdc_{name}"), slot);
    let target = database(&format!("rowid_cdc_{name}_target"), "none");
    src.run(&format!(
        "CREATE EXTENSION pg_trickle_ext; SELECT pgtrickle.enable_identity_messages(); {setup}"
    ))
    .unwrap();
    if !target_setup.is_empty() {
        target.run(target_setup).unwrap();
    }
    (src, target, Dir::new(name))
}

/// rowid-cdc for slot `slot` and publication `publication` of `src`, its files in `dir`.
fn source_cdc<'a>(src: &Psql, slot: &'a str, publication: &'a str, dir: &'a Dir) -> Cdc<'a> {
    Cdc {
        dsn: src.dsn(),
        slot,
        publication,
        dir,
    }
}

/// `sql`'s rows on `db`, sorted, as text.
fn rows(db: &Psql, sql: &str) -> Vec<String> {
    let mut rows: Vec<String> = db.run(sql).unwrap().lines().map(str::to_string).collect();
    rows.sort();
    rows
}

/// Item 4: equal rows spelt differently (numeric `2.0` and `2.00`, float8 `-0` and `0`,
/// interval `'1 day'` and `'24:00:00'`, jsonb `1.0` and `1.00`) share a keyless identity; the
/// replica must still hold each row as written, through the snapshot and the stream, deletes
/// and updates of one of them (before the fix it held one spelling for all of them).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn keyless_rows_keep_their_own_values() {
    let slot = "rowid_exact_spelt";
    let (src, target, dir) = pair(
        "exact_spelt",
        slot,
        "CREATE TABLE kl (n numeric, f float8, i interval, j jsonb);
         ALTER TABLE kl REPLICA IDENTITY FULL;
         INSERT INTO kl VALUES (2.0, 0, '1 day', '1.0'), (2.00, '-0', '24 hours', '1.00'),
                               (2.00, '-0', '24 hours', '1.00');
         CREATE PUBLICATION p FOR TABLE kl;",
        // An unbounded identity: the probe index needs the extension.
        "CREATE EXTENSION pg_trickle_ext;",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot", "--snapshot"]);
    let text = |db: &Psql, table: &str| {
        rows(
            db,
            &format!(
                "SELECT n::text || '|' || f::text || '|' || i::text || '|' || j::text FROM {table};"
            ),
        )
    };
    let steps = [
        "INSERT INTO kl VALUES (2, 0, '24:00:00', '1'), (2.000, '-0', '1 day', '1.000');",
        "DELETE FROM kl WHERE ctid = (SELECT ctid FROM kl WHERE n::text = '2.00' LIMIT 1);",
        "UPDATE kl SET n = 2.0000 WHERE n::text = '2';",
        "DELETE FROM kl WHERE f::text = '0';",
        "INSERT INTO kl VALUES (2.0, '-0', '1 day', '1.0');",
    ];
    for (i, step) in steps.iter().enumerate() {
        src.run(step).unwrap();
        let count = one(&src, "SELECT count(*) FROM kl;");
        wait_for(
            &target,
            "SELECT count(*) FROM public.kl;",
            &count,
            &mut running,
            &format!("step {i}"),
        );
        assert_eq!(
            text(&target, "public.kl"),
            text(&src, "kl"),
            "after step {i}: every row as written"
        );
    }
}

/// Item 11: a column of a `NOT NULL` domain. A delete's written row is NULL in every column;
/// the delta typed with the domain refused it (`23502: domain ... does not allow null
/// values`) and every delete stopped the sink, at every restart.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_not_null_domain_column_takes_deletes() {
    let slot = "rowid_exact_domain";
    let domain = "CREATE DOMAIN public.email AS text NOT NULL CHECK (VALUE LIKE '%@%');";
    let (src, target, dir) = pair(
        "exact_domain",
        slot,
        &format!(
            "{domain} CREATE TABLE dm (id int4 PRIMARY KEY, e email);
             INSERT INTO dm VALUES (1, 'a@x'), (2, 'b@x');
             CREATE PUBLICATION p FOR TABLE dm;"
        ),
        domain,
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let mut running = cdc.started(
        &format!("replica:{}", target.dsn()),
        &["--create-slot", "--snapshot"],
    );
    src.run("DELETE FROM dm WHERE id = 1; UPDATE dm SET e = 'c@x' WHERE id = 2; INSERT INTO dm VALUES (3, 'd@x');")
        .unwrap();
    wait_for(
        &target,
        "SELECT string_agg(id || e, ',' ORDER BY id) FROM public.dm;",
        "2c@x,3d@x",
        &mut running,
        "the delete, the update and the insert",
    );
}

/// Item 10: a table renamed, then changed again (a column added), then the consumer restarted,
/// then its key changed: the storage follows the rename at its position, its record names it,
/// and the key change rebuilds the renamed storage (before: the storage stayed under the old
/// name, recorded with the new schema, and the restart refused it, wedged).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_renamed_table_is_followed_through_a_restart_and_a_key_change() {
    let slot = "rowid_exact_rename";
    let (src, target, dir) = pair(
        "exact_rename",
        slot,
        "CREATE TABLE t (id int8 PRIMARY KEY, code text NOT NULL UNIQUE, v int4);
         INSERT INTO t SELECT g, 'c' || g, g FROM generate_series(1, 5) g;
         CREATE PUBLICATION p FOR ALL TABLES;",
        "CREATE EXTENSION pg_trickle_ext;",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot", "--snapshot"]);
    // The DDL waits for the copy: one committed after the slot's consistent point and before
    // the copy locks the table is refused by design (`tests/snapshot.rs` pins that refusal),
    // and on a slow machine that window is wide enough for this test's next statement to
    // land in it (a fresh-machine CI run did; `ROWID_CDC_TEST_PAUSE_BEFORE_COPY_MS=2000`
    // reproduces it every time without this wait).
    wait_for(
        &target,
        "SELECT count(*) FROM public.t;",
        "5",
        &mut running,
        "the snapshot of t",
    );
    src.run("ALTER TABLE t RENAME TO t2; ALTER TABLE t2 ADD COLUMN w int4; INSERT INTO t2 VALUES (6, 'c6', 6, 60);")
        .unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.t2;",
        "6",
        &mut running,
        "the renamed table's storage",
    );
    drop(running);
    wait_free(&src, slot);
    let mut running = Running(cdc.command_into(&sink, &[]).spawn().unwrap());
    src.run(
        "ALTER TABLE t2 DROP CONSTRAINT t_pkey; ALTER TABLE t2 ADD PRIMARY KEY (code);
         UPDATE t2 SET v = -v WHERE id = 1;",
    )
    .unwrap();
    wait_for(
        &target,
        "SELECT v FROM public.t2 WHERE id = 1;",
        "-1",
        &mut running,
        "the change after the key change",
    );
    assert_eq!(
        one(&target, "SELECT to_regclass('public.t') IS NULL;"),
        "t",
        "no storage under the old name"
    );
    assert_eq!(
        one(
            &target,
            "SELECT storage FROM pgtrickle_replica.__pgt_replica_tables;"
        ),
        "\"public\".\"t2\""
    );
    assert_eq!(
        rows(&target, "SELECT id, code, v, w FROM public.t2;"),
        rows(&src, "SELECT id, code, v, w FROM t2;")
    );
    assert_eq!(
        one(
            &target,
            "SELECT count(*) FROM public.t2 WHERE __pgt_row_id \
             IS DISTINCT FROM pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(code));"
        ),
        "0",
        "every identity rebuilt from the new key"
    );
}

/// Item 5: a replica behind the position the state file recorded for it (its database
/// restored from an older backup: here its position set back) is refused at restart by name;
/// before, the run resumed from the state file and everything in between was missing.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_replica_behind_its_state_file_is_refused() {
    let slot = "rowid_exact_behind";
    let (src, target, dir) = pair(
        "exact_behind",
        slot,
        "CREATE TABLE b (id int8 PRIMARY KEY); CREATE PUBLICATION p FOR TABLE b;",
        "",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot"]);
    src.run("INSERT INTO b VALUES (1);").unwrap();
    src.run("INSERT INTO b VALUES (2);").unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.b;",
        "2",
        &mut running,
        "two transactions",
    );
    drop(running);
    wait_free(&src, slot);
    // As a restore from before the second transaction would leave it.
    target
        .run(
            "DELETE FROM public.b WHERE id = 2;
             UPDATE pgtrickle_replica.__pgt_replica_position SET commit_lsn = '0/1';",
        )
        .unwrap();
    let out = cdc.run_into(&sink, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the replica in \"pgtrickle_replica\" holds changes through commit 0/1")
            && err.contains("the state file says it had made durable"),
        "{err}"
    );
}

/// Item 5 for the change buffer (the same check of every sink that records its position): a
/// buffer's database restored from before the last transaction is refused at restart, naming
/// the buffer.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_change_buffer_behind_its_state_file_is_refused() {
    let slot = "rowid_exact_buffer_behind";
    let (src, target, dir) = pair(
        "exact_buffer_behind",
        slot,
        "CREATE TABLE b (id int8 PRIMARY KEY); CREATE PUBLICATION p FOR TABLE b;",
        "",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("postgres:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot"]);
    src.run("INSERT INTO b VALUES (1);").unwrap();
    src.run("INSERT INTO b VALUES (2);").unwrap();
    // The buffer of `b`, of the buffers prefixed `"pgtrickle_changes"."rowid_cdc"`.
    let relid = one(&src, "SELECT 'public.b'::regclass::oid;");
    let buffer = format!("pgtrickle_changes.rowid_cdc_{relid}");
    wait_for(
        &target,
        &format!("SELECT count(*) FROM {buffer};"),
        "2",
        &mut running,
        "two transactions",
    );
    drop(running);
    wait_free(&src, slot);
    // As a restore from before the second transaction would leave it.
    target
        .run(&format!(
            "DELETE FROM {buffer} WHERE commit_lsn = (SELECT max(commit_lsn) FROM {buffer});
             UPDATE pgtrickle_changes.rowid_cdc_position SET commit_lsn = '0/1';"
        ))
        .unwrap();
    let out = cdc.run_into(&sink, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("\"pgtrickle_changes\".\"rowid_cdc\" holds changes through commit 0/1")
            && err.contains("the state file says it had made durable"),
        "{err}"
    );
}

/// Item 6: publications through which a replica cannot stay equal to its sources are refused
/// at start for the replica sink, each by what it leaves out and its fix; the JSON-lines sink
/// starts and says what its output will lack.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn publications_that_cannot_keep_a_replica_equal_are_refused() {
    let slot = "rowid_exact_pub";
    let (src, target, dir) = pair(
        "exact_pub",
        slot,
        "CREATE TABLE nd (id int8 PRIMARY KEY, v int4, secret text);
         CREATE TABLE parts (id int8, k int4) PARTITION BY RANGE (k);
         CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (10);
         CREATE PUBLICATION no_delete FOR TABLE nd WITH (publish = 'insert, update');
         CREATE PUBLICATION filtered FOR TABLE nd WHERE (v > 0);
         CREATE PUBLICATION some_columns FOR TABLE nd (id, v);
         CREATE PUBLICATION via_root FOR TABLE parts WITH (publish_via_partition_root = true);",
        "",
    );
    let _drop = DropSlot(&src, slot);
    for (publication, said) in [
        ("no_delete", "it does not publish delete, truncate"),
        ("filtered", "it publishes public.nd with a row filter"),
        (
            "some_columns",
            "it publishes only some columns of public.nd",
        ),
        (
            "via_root",
            "it publishes the partitions of public.parts as their roots",
        ),
    ] {
        let cdc = source_cdc(&src, slot, publication, &dir);
        let out = cdc.run_into(&format!("replica:{}", target.dsn()), &["--create-slot"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{publication}: {err}");
        assert!(
            err.contains(&format!(
                "publication \"{publication}\" cannot keep a replica equal to its sources"
            )) && err.contains(said),
            "{publication}: {err}"
        );
        assert_eq!(
            one(
                &src,
                &format!("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}';")
            ),
            "0",
            "{publication}: nothing created"
        );
    }
    // A JSON-lines consumer of such a publication starts, told what it will not see.
    let cdc = source_cdc(&src, slot, "no_delete", &dir);
    let mut running = cdc.spawn(&["--create-slot"]);
    cdc.wait_started(&mut running);
    let err = running.interrupt();
    assert!(
        err.contains("warning: publication \"no_delete\" does not carry every change")
            && err.contains("it does not publish delete, truncate"),
        "{err}"
    );
}

/// Item 8: a new slot (no state file) whose replica would be kept in a schema where another
/// run's storage tables are recorded is refused by name, instead of adding its snapshot to
/// them (a keyless table held every row twice, a keyed one stopped at its first conflict);
/// so is a second slot's run over storage another slot keeps.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_new_slot_into_another_runs_storage_is_refused() {
    let slot = "rowid_exact_new";
    let (src, target, dir) = pair(
        "exact_new",
        slot,
        "CREATE TABLE kl (a int4, b text); ALTER TABLE kl REPLICA IDENTITY FULL;
         INSERT INTO kl VALUES (1, 'x'), (1, 'x');
         CREATE PUBLICATION p FOR TABLE kl;",
        "CREATE EXTENSION pg_trickle_ext;",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot", "--snapshot"]);
    wait_for(
        &target,
        "SELECT count(*) FROM public.kl;",
        "2",
        &mut running,
        "the snapshot",
    );
    drop(running);
    wait_free(&src, slot);
    // The slot and the state file are gone; a new slot, same name and another.
    src.run(&format!("SELECT pg_drop_replication_slot('{slot}');"))
        .unwrap();
    target
        .run("DELETE FROM pgtrickle_replica.__pgt_replica_position;")
        .unwrap();
    std::fs::remove_file(dir.file("cdc.state")).unwrap();
    for new_slot in [slot, "rowid_exact_new_2"] {
        let _drop = DropSlot(&src, new_slot);
        let cdc = source_cdc(&src, new_slot, "p", &dir);
        let out = cdc.run_into(&sink, &["--create-slot", "--snapshot"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{new_slot}: {err}");
        assert!(
            err.contains("public.kl's replica \"public\".\"kl\" is kept by")
                && err.contains("another --replica-schema"),
            "{new_slot}: {err}"
        );
        let _ = std::fs::remove_file(dir.file("cdc.state"));
    }
    assert_eq!(
        one(&target, "SELECT count(*) FROM public.kl;"),
        "2",
        "nothing added"
    );
}

/// Item 12b: two replica sinks (two slots, two publications) started at the same moment into
/// one target database and the default replica schema both start and apply: they create the
/// schema and its tables, and revoke PUBLIC's rights on them, one after the other (before,
/// one could die on `pg_namespace_nspname_index`, or with "tuple concurrently updated" from
/// two REVOKEs of one table: a fresh-machine run hit that one). Sixty times, the schema
/// dropped in between: with the REVOKE outside the creation lock, the first run of this
/// loop failed within two seconds; with it inside, three runs (180 starts) passed.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn two_sinks_starting_into_one_schema_both_start() {
    let (src, target, dir) = pair(
        "exact_two",
        "rowid_exact_two_a",
        "CREATE TABLE a (id int8 PRIMARY KEY); CREATE TABLE b (id int8 PRIMARY KEY);
         CREATE PUBLICATION pa FOR TABLE a; CREATE PUBLICATION pb FOR TABLE b;",
        "",
    );
    let dir_b = Dir::new("exact_two_b");
    let sink = format!("replica:{}", target.dsn());
    for round in 0..60 {
        let _drop_a = DropSlot(&src, "rowid_exact_two_a");
        let _drop_b = DropSlot(&src, "rowid_exact_two_b");
        let _ = std::fs::remove_file(dir.file("cdc.state"));
        let _ = std::fs::remove_file(dir_b.file("cdc.state"));
        target
            .run("DROP SCHEMA IF EXISTS pgtrickle_replica CASCADE; DROP TABLE IF EXISTS public.a, public.b;")
            .unwrap();
        let a = source_cdc(&src, "rowid_exact_two_a", "pa", &dir);
        let b = source_cdc(&src, "rowid_exact_two_b", "pb", &dir_b);
        let mut running_a = Running(a.command_into(&sink, &["--create-slot"]).spawn().unwrap());
        let mut running_b = Running(b.command_into(&sink, &["--create-slot"]).spawn().unwrap());
        a.wait_started(&mut running_a);
        b.wait_started(&mut running_b);
        src.run(&format!(
            "INSERT INTO a VALUES ({round}); INSERT INTO b VALUES ({round});"
        ))
        .unwrap();
        for (table, running) in [("a", &mut running_a), ("b", &mut running_b)] {
            wait_for(
                &target,
                &format!("SELECT count(*) FROM public.{table} WHERE id = {round};"),
                "1",
                running,
                &format!("round {round}: sink {table}"),
            );
        }
        drop(running_a);
        drop(running_b);
        wait_free(&src, "rowid_exact_two_a");
        wait_free(&src, "rowid_exact_two_b");
    }
}

/// Item 13: the target's defaults time statements out (`statement_timeout`, `lock_timeout`
/// of the database) and a session holds a storage table locked for two seconds while changes
/// arrive: the sink's session sets its own timeouts and waits, and applies once the lock goes
/// (before, the lock timeout was reported as a replica that no longer equals its source, and
/// the run ended for good).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_locked_storage_table_is_waited_for() {
    let slot = "rowid_exact_lock";
    let (src, target, dir) = pair(
        "exact_lock",
        slot,
        "CREATE TABLE l (id int8 PRIMARY KEY, v int4);
         INSERT INTO l SELECT g, g FROM generate_series(1, 100) g;
         CREATE PUBLICATION p FOR TABLE l;",
        "",
    );
    let _drop = DropSlot(&src, slot);
    target
        .run(
            "ALTER DATABASE rowid_cdc_exact_lock_target SET lock_timeout = '100ms';
             ALTER DATABASE rowid_cdc_exact_lock_target SET statement_timeout = '150ms';",
        )
        .unwrap();
    let cdc = source_cdc(&src, slot, "p", &dir);
    let mut running = cdc.started(
        &format!("replica:{}", target.dsn()),
        &["--create-slot", "--snapshot"],
    );
    wait_for(
        &target,
        "SELECT count(*) FROM public.l;",
        "100",
        &mut running,
        "the snapshot",
    );
    let locker = Command::new("psql")
        .args(target.args().split_whitespace())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg("SET statement_timeout = 0; BEGIN; LOCK TABLE public.l IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(2); COMMIT;")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while one(
        &target,
        "SELECT count(*) FROM pg_locks WHERE relation = 'public.l'::regclass AND mode = 'AccessExclusiveLock' AND granted;",
    ) != "1"
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the lock was never taken"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    src.run("UPDATE l SET v = -v WHERE id <= 50;").unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.l WHERE v < 0;",
        "50",
        &mut running,
        "the update after the lock",
    );
    assert!(locker.wait_with_output().unwrap().status.success());
}

/// Item 12: `ALTER TYPE ... RENAME VALUE` of an enum in a key. The identities are its labels,
/// so every stored identity must be computed again (before, nothing told the replica: the
/// next update of such a row was refused as "not stored"). The replica's database keeps its
/// own copy of the type: until its label is renamed too, the sink stops naming both label
/// lists, having applied nothing; once it is, the restart rebuilds and goes on.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn an_enum_label_renamed_under_a_key_rebuilds_its_identities() {
    let slot = "rowid_exact_enum";
    let mood = "CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');";
    let (src, target, dir) = pair(
        "exact_enum",
        slot,
        &format!(
            "{mood} CREATE TABLE em (m mood PRIMARY KEY, v int4);
             INSERT INTO em VALUES ('sad', 1), ('ok', 2);
             CREATE PUBLICATION p FOR TABLE em;"
        ),
        &format!("CREATE EXTENSION pg_trickle_ext; {mood}"),
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot", "--snapshot"]);
    wait_for(
        &target,
        "SELECT count(*) FROM public.em;",
        "2",
        &mut running,
        "the snapshot",
    );
    src.run("ALTER TYPE mood RENAME VALUE 'sad' TO 'blue';")
        .unwrap();
    let (ok, err) = running.finish(Duration::from_secs(60));
    assert!(!ok, "{err}");
    assert!(
        err.contains("public.em's identities depend on the labels of enum public.mood")
            && err.contains("[\"blue\", \"ok\", \"happy\"]")
            && err.contains("[\"sad\", \"ok\", \"happy\"]"),
        "{err}"
    );
    target
        .run("ALTER TYPE public.mood RENAME VALUE 'sad' TO 'blue';")
        .unwrap();
    let mut running = cdc.started(&sink, &[]);
    src.run("UPDATE em SET v = 10 WHERE m = 'blue'; INSERT INTO em VALUES ('happy', 3);")
        .unwrap();
    wait_for(
        &target,
        "SELECT string_agg(m::text || v, ',' ORDER BY m) FROM public.em;",
        "blue10,ok2,happy3",
        &mut running,
        "the changes after the rename",
    );
    assert_eq!(
        one(
            &target,
            "SELECT count(*) FROM public.em WHERE __pgt_row_id \
             IS DISTINCT FROM pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(m));"
        ),
        "0",
        "every identity of the new label"
    );
}

/// Item 14: `CREATE TABLE ... AS` (and `SELECT INTO`) under `FOR ALL TABLES` write the new
/// table's rows before its identity schema, which the event trigger writes at the command's
/// end: before, its rows were unidentified and stopped the replica at every restart. The
/// capture holds them (here past a 4 kB memory bound, so through its temporary file) until the
/// schema, and the replica keeps the table, through a restart, a key added, updates and
/// deletes.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn create_table_as_under_all_tables_is_replicated() {
    let slot = "rowid_exact_ctas";
    let (src, target, dir) = pair(
        "exact_ctas",
        slot,
        "CREATE TABLE seed (id int8 PRIMARY KEY); CREATE PUBLICATION p FOR ALL TABLES;",
        "CREATE EXTENSION pg_trickle_ext;",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let spawn = |extra: &[&str]| {
        let mut running = Running(
            cdc.command_into(&sink, extra)
                .env("ROWID_CDC_TEST_HOLD_BYTES", "4096")
                .spawn()
                .unwrap(),
        );
        cdc.wait_started(&mut running);
        running
    };
    let mut running = spawn(&["--create-slot"]);
    src.run(
        "CREATE TABLE c AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 3000) g;
         SELECT g AS id, 'into' AS w INTO s FROM generate_series(1, 10) g;
         INSERT INTO seed VALUES (1);",
    )
    .unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.seed;",
        "1",
        &mut running,
        "the transactions after the CREATE TABLE AS",
    );
    drop(running);
    wait_free(&src, slot);
    let mut running = spawn(&[]);
    src.run(
        "ALTER TABLE c ADD PRIMARY KEY (id); UPDATE c SET v = 'u' WHERE id % 7 = 0;
         DELETE FROM c WHERE id % 11 = 0; INSERT INTO seed VALUES (2);",
    )
    .unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.seed;",
        "2",
        &mut running,
        "the changes after the restart",
    );
    for (table, columns) in [("c", "id, v"), ("s", "id, w")] {
        assert_eq!(
            rows(&target, &format!("SELECT {columns} FROM public.{table};")),
            rows(&src, &format!("SELECT {columns} FROM {table};")),
            "{table}"
        );
    }
}

/// The stream tables of the test below: name, query, refresh mode.
const STREAM_TABLES: &[(&str, &str, &str)] = &[
    // Bounded unique: the direct unique index, REPLICA IDENTITY USING INDEX, a column list.
    (
        "s_keyed",
        "SELECT id, region, amount FROM orders WHERE amount > 2",
        "DIFFERENTIAL",
    ),
    (
        "s_group",
        "SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer",
        "IMMEDIATE",
    ),
    // Unbounded (a text key): the probe index, REPLICA IDENTITY FULL.
    (
        "s_text",
        "SELECT region, count(*) AS n FROM orders GROUP BY region",
        "DIFFERENTIAL",
    ),
    // Keyless: a multiset whose duplicates share an identity.
    ("s_bag", "SELECT x, y FROM bag", "DIFFERENTIAL"),
    ("s_full", "SELECT x, y FROM bag WHERE x > 0", "FULL"),
];

/// The expression of a digest of every stream table's rows, `__pgt_row_id` included, the
/// tables in `schema`.
fn stream_digest_sql(schema: &str) -> String {
    let parts: Vec<String> = STREAM_TABLES
        .iter()
        .map(|(name, _, _)| {
            format!(
                "(SELECT count(*) || ':' || \
                   coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') \
                 FROM {schema}.{name} t)"
            )
        })
        .collect();
    parts.join(" || ' ' || ")
}

/// The digest of [`stream_digest_sql`] on `db`.
fn stream_digest(db: &Psql, schema: &str) -> String {
    one(db, &format!("SELECT {};", stream_digest_sql(schema)))
}

/// Issue 35, requirement 4: stream tables published with `publish_stream_table` are kept by
/// `--sink replica:` with their own identities (identity schema messages format 8, `stored`):
/// keyed ones (a column list of every column; REPLICA IDENTITY USING INDEX, so an update
/// carries no old row), unbounded and keyless ones (FULL; a multiset with duplicates), in
/// each refresh mode. After the snapshot and after each round of writes and refreshes (the
/// consumer restarted among them), every replica equals its stream table row for row,
/// `__pgt_row_id` included, and each storage has its stream table's index class and replica
/// identity. A plain table with a column of that name is refused by name.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn stream_tables_are_kept_with_their_own_identities() {
    let slot = "rowid_exact_stream";
    let mut setup = String::from(
        "CREATE TABLE orders (id int8 PRIMARY KEY, region text, amount numeric(10,2), customer int4);
         CREATE TABLE bag (x int4, y text);
         INSERT INTO orders SELECT g, 'r' || (g % 3), g / 4.0, g % 5 FROM generate_series(1, 60) g;
         INSERT INTO bag SELECT g % 4, 'v' || (g % 2) FROM generate_series(1, 24) g;",
    );
    for (name, query, mode) in STREAM_TABLES {
        setup.push_str(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, refresh_mode => '{mode}');
             SELECT pgtrickle.publish_stream_table('{name}', 'p');"
        ));
    }
    let (src, target, dir) = pair(
        "exact_stream",
        slot,
        &setup,
        // An unbounded identity: the probe index needs the extension.
        "CREATE EXTENSION pg_trickle_ext;",
    );
    let _drop = DropSlot(&src, slot);
    let cdc = source_cdc(&src, slot, "p", &dir);
    let sink = format!("replica:{}", target.dsn());
    let mut running = cdc.started(&sink, &["--create-slot", "--snapshot"]);
    let refresh = || {
        for (name, _, mode) in STREAM_TABLES {
            if *mode != "IMMEDIATE" {
                src.run(&format!("SELECT pgtrickle.refresh_stream_table('{name}');"))
                    .unwrap();
            }
        }
    };
    // Every copy equal to its stream table, identities included.
    let synced = |running: &mut Running, what: &str| {
        let expected = stream_digest(&src, "public");
        let digest = format!("SELECT {};", stream_digest_sql("public"));
        wait_for(&target, &digest, &expected, running, what);
    };
    synced(&mut running, "the snapshot");
    let steps = [
        "INSERT INTO orders SELECT g, 'r' || (g % 4), g / 3.0, g % 7 FROM generate_series(61, 90) g;
         INSERT INTO bag VALUES (1, 'v1'), (1, 'v1'), (7, 'new');",
        "UPDATE orders SET amount = amount + 1 WHERE id % 3 = 0;
         UPDATE orders SET region = 'moved' WHERE id % 5 = 0;
         DELETE FROM bag WHERE ctid IN (SELECT ctid FROM bag WHERE x = 1 LIMIT 2);",
        "DELETE FROM orders WHERE customer = 2;
         UPDATE bag SET y = 'w' WHERE x = 3;
         INSERT INTO bag VALUES (0, NULL), (0, NULL);",
        "UPDATE orders SET customer = 2 WHERE id % 4 = 1;
         DELETE FROM orders WHERE region = 'moved';
         DELETE FROM bag WHERE x = 7;",
        "TRUNCATE bag; INSERT INTO bag VALUES (2, 'back');",
    ];
    for (i, step) in steps.iter().enumerate() {
        if i == 3 {
            // Restarted: each storage is found in the replica's record (its stored identity
            // among it) and followed from there.
            drop(running);
            wait_free(&src, slot);
            running = cdc.started(&sink, &[]);
        }
        src.run(step).unwrap();
        refresh();
        synced(&mut running, &format!("step {i}"));
    }
    // Each storage has the index class and replica identity of its stream table: the direct
    // unique index as replica identity for a bounded unique identity, the probe expression
    // (and FULL) for an unbounded one.
    let classes = "SELECT string_agg(c.relname || ':' || c.relreplident::text || ':' || i.indisunique \
                     || ':' || (i.indexprs IS NOT NULL) || ':' || i.indisreplident, ' ' \
                     ORDER BY c.relname) \
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
                   JOIN pg_namespace n ON n.oid = c.relnamespace \
                   WHERE n.nspname = 'public' AND c.relname LIKE 's\\_%';";
    let at_source = one(&src, classes);
    assert_eq!(one(&target, classes), at_source, "index classes");
    for keyed in ["s_keyed:i:true:false:true", "s_group:i:true:false:true"] {
        assert!(at_source.contains(keyed), "{at_source}");
    }
    // A table that only has a column of that name is no stream table: refused by name.
    src.run(
        "CREATE TABLE imitation (__pgt_row_id bytea PRIMARY KEY, v int4);
         ALTER PUBLICATION p ADD TABLE imitation;
         INSERT INTO imitation VALUES ('\\x01', 1);",
    )
    .unwrap();
    let (ok, err) = running.finish(Duration::from_secs(60));
    assert!(!ok, "{err}");
    assert!(
        err.contains("public.imitation") && err.contains("does not say it is a stream table"),
        "{err}"
    );
}
