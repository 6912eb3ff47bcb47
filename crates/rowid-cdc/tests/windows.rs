//! The windows of a chunked snapshot (issue 33, "exact in every window"), each made to happen
//! with the real binary instead of waited for: a commit held by a synchronous standby that
//! never comes (decoded by the stream, invisible to new snapshots), a kill between a chunk's
//! delivery and its watermark, a kill between a chunk's sink commit and the state file's, a
//! key moved into the rows already copied without its TOASTed value, and a column dropped
//! while the stream is one DDL behind. The consumer is held
//! before a chunk's read and crashed at named points (`ROWID_CDC_TEST_PAUSE`,
//! `ROWID_CDC_TEST_CRASH`: rowid-cdc's `fault` module), the source commits held with
//! `synchronous_standby_names`; every test ends with the output replayed strictly by identity
//! (an insert of a row held, an update or delete of one not held, fails) and compared with the
//! table, or the replica compared with its source.
//!
//! Needs a server with `wal_level = logical`, the extension, and the server binaries first on
//! `PATH`: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Cdc, Dir, DropSlot, Gate, Running, alter_system, database, hold_commits, one, wait_for,
};
use rowid_testkit::cluster::Cluster;
use rowid_testkit::psql::Psql;
use serde_json::Value;

/// Lets every held commit go when dropped, whatever happened (a held one would keep the
/// cluster from stopping).
struct LetGo<'a>(&'a Psql);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        let _ = alter_system(self.0, "RESET synchronous_standby_names");
    }
}

/// A source cluster of the test's own (its commits can be held without holding anyone
/// else's), `table` created and published as `p` with identity messages on.
fn source(dir: &Dir, port: u16, setup: &str) -> Cluster {
    let cluster = Cluster::start(
        &rowid_testkit::cluster::server_bindir(),
        &dir.file("source"),
        port,
    )
    .unwrap();
    let db = cluster.psql();
    // Only the test's sessions commit: no autovacuum transaction to be held too.
    alter_system(&db, "SET autovacuum = off").unwrap();
    db.run(&format!(
        "CREATE EXTENSION pg_trickle_ext; SELECT pgtrickle.enable_identity_messages(); {setup}"
    ))
    .unwrap();
    cluster
}

/// A port for a test's own cluster: `base` plus this process's share.
fn port(base: u16) -> u16 {
    base + (std::process::id() % 300) as u16
}

/// Starts `sql` in a session of its own whose commit waits for a synchronous standby (the
/// cluster's `synchronous_standby_names` names one that never comes), and waits until it does:
/// the commit record is written and decoded, the transaction invisible to new snapshots.
fn held_commit(db: &Psql, sql: &str) -> Child {
    let child = Command::new("psql")
        .args(db.args().split_whitespace())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg(format!("SET synchronous_commit = on; {sql}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while one(
        db,
        "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event = 'SyncRep';",
    ) != "1"
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the commit was never held"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// rowid-cdc reading `table` in chunks of `rows` from a new slot into `sink`, held before each
/// chunk's read until `gate` lets it pass, with `crash` (a crash point) when given; returns
/// once its slot is at a consistent point.
fn chunked(
    cdc: &Cdc<'_>,
    sink: &str,
    table: &str,
    rows: &str,
    gate: &Gate,
    crash: Option<&str>,
) -> Running {
    let (name, value) = gate.env("before-chunk-read");
    let mut command = cdc.command_into(
        sink,
        &[
            "--create-slot",
            "--snapshot-table",
            table,
            "--snapshot-chunk",
            rows,
        ],
    );
    command.env(name, value);
    if let Some(point) = crash {
        command.env("ROWID_CDC_TEST_CRASH", point);
    }
    let mut running = Running(command.spawn().unwrap());
    cdc.wait_started(&mut running);
    running
}

/// `cdc`'s JSON-lines sink.
fn lines_sink(cdc: &Cdc<'_>) -> String {
    format!("jsonl:{}", cdc.dir.file("changes.jsonl").display())
}

/// Waits until the consumer's state says table `relid`'s chunked snapshot is done.
fn wait_chunks_done(cdc: &Cdc<'_>, running: &mut Running) {
    let t = Instant::now();
    loop {
        let state: Value = std::fs::read_to_string(cdc.dir.file("cdc.state"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null);
        let cursors = state["chunks"]["cursors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !cursors.is_empty() && cursors.iter().all(|c| c["done"] == true) {
            return;
        }
        running.still_within(t, Duration::from_secs(120), "the chunks never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until a line of `relation` with key `id` (its new row's `id`) was written.
fn wait_line(cdc: &Cdc<'_>, relation: &str, id: &str, running: &mut Running, what: &str) {
    let t = Instant::now();
    while !cdc
        .lines()
        .iter()
        .any(|l| l["relation"] == relation && l["new"]["id"] == id)
    {
        running.still_within(t, Duration::from_secs(60), what);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a crash point's abort; its stderr.
fn crashed(mut running: Running, point: &str) -> String {
    let t = Instant::now();
    while running.0.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never crashed at {point}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = running.report();
    assert!(err.contains(&format!("test crash at {point}")), "{err}");
    err
}

/// `public.k`'s rows (`id` -> `v`) replayed from the lines, strictly by identity.
fn replay_k(lines: &[Value]) -> BTreeMap<String, (String, String)> {
    let mut rows: BTreeMap<String, (String, String)> = BTreeMap::new();
    for l in lines.iter().filter(|l| l["relation"] == "public.k") {
        let id = |k: &str| l[k].as_str().unwrap().to_string();
        let row = |image: &Value| {
            (
                image["id"].as_str().unwrap().to_string(),
                image["v"].as_str().unwrap_or_default().to_string(),
            )
        };
        match l["op"].as_str().unwrap() {
            "truncate" => rows.clear(),
            "snapshot" | "insert" => {
                assert!(
                    rows.insert(id("new_id"), row(&l["new"])).is_none(),
                    "twice: {l}"
                );
            }
            "update" => {
                assert!(
                    rows.remove(&id("old_id")).is_some(),
                    "an update of nothing: {l}"
                );
                assert!(
                    rows.insert(id("new_id"), row(&l["new"])).is_none(),
                    "twice: {l}"
                );
            }
            "delete" => {
                assert!(
                    rows.remove(&id("old_id")).is_some(),
                    "a delete of nothing: {l}"
                );
            }
            other => panic!("unexpected {other}: {l}"),
        }
    }
    rows
}

/// Asserts the replayed `public.k` is the table now.
fn assert_k_replays(db: &Psql, cdc: &Cdc<'_>) {
    let mut replayed: Vec<String> = replay_k(&cdc.lines())
        .into_values()
        .map(|(id, v)| format!("{id}|{v}"))
        .collect();
    replayed.sort();
    let mut table: Vec<String> = db
        .run("SELECT id || '|' || v FROM k;")
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    table.sort();
    let missing: Vec<&String> = table.iter().filter(|r| !replayed.contains(r)).collect();
    let extra: Vec<&String> = replayed.iter().filter(|r| !table.contains(r)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the lines replay to the table: missing {missing:?}, not in the table {extra:?}"
    );
}

/// Item 1 and item 15: a transaction the stream delivered while a chunked snapshot runs (its
/// row above the cursor dropped: "a later chunk holds it") that new snapshots do not see yet,
/// its commit waiting for a synchronous standby that never comes. The next chunks must not be
/// read without it (before the fix they were, and its row was lost), and the stream must go on
/// meanwhile (before the fix, on PostgreSQL 15 and 16, a chunk's watermark committed with
/// `synchronous_commit = on` and waited for that standby too, stopping everything).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_chunk_never_misses_a_transaction_the_stream_delivered() {
    let dir = Dir::new("windows-unseen");
    let cluster = source(
        &dir,
        port(58_000),
        "CREATE TABLE k (id int8 PRIMARY KEY, v text);
         INSERT INTO k SELECT g, 'r' || g FROM generate_series(1, 200) g;
         CREATE TABLE other (id int8 PRIMARY KEY);
         CREATE PUBLICATION p FOR TABLE k, other;",
    );
    let db = cluster.psql();
    let _let_go = LetGo(&db);
    let cdc = Cdc {
        dsn: cluster.dsn("postgres"),
        slot: "unseen",
        publication: "p",
        dir: &dir,
    };
    let gate = Gate(dir.file("gate"));
    let mut running = chunked(&cdc, &lines_sink(&cdc), "public.k", "20", &gate, None);
    for _ in 0..3 {
        gate.pass(&mut running);
    }
    wait_line(&cdc, "public.k", "60", &mut running, "three chunks");
    // Held before the fourth read: a commit that waits for a standby that never comes.
    hold_commits(&db);
    let held = held_commit(&db, "INSERT INTO k VALUES (1000, 'held');");
    let open = gate.open();
    // The stream goes on while the commit is held.
    db.run("SET synchronous_commit = local; INSERT INTO other VALUES (1);")
        .unwrap();
    wait_line(
        &cdc,
        "public.other",
        "1",
        &mut running,
        "the stream stopped while a commit was held",
    );
    std::thread::sleep(Duration::from_secs(2));
    alter_system(&db, "RESET synchronous_standby_names").unwrap();
    assert!(held.wait_with_output().unwrap().status.success());
    wait_chunks_done(&cdc, &mut running);
    db.run("INSERT INTO other VALUES (2);").unwrap();
    wait_line(&cdc, "public.other", "2", &mut running, "the last change");
    open.store(true, std::sync::atomic::Ordering::Relaxed);
    let err = running.interrupt();
    assert_k_replays(&db, &cdc);
    assert!(
        err.contains("is not visible to new snapshots yet"),
        "the wait is said: {err}"
    );
}

/// Item 7: killed after a chunk was delivered (at the first change its snapshot did not see)
/// and before its watermark. A transaction the chunk's snapshot saw whose commit record comes
/// after that change is in the chunk; resumed, the run must route it with the rows delivered
/// before the chunk, as it would have gone on, not deliver it again.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_kill_between_a_chunks_delivery_and_its_watermark_repeats_nothing() {
    let dir = Dir::new("windows-watermark");
    let cluster = source(
        &dir,
        port(58_300),
        "CREATE TABLE k (id int8 PRIMARY KEY, v text);
         INSERT INTO k SELECT 2 * g, 'r' || g FROM generate_series(1, 50) g;
         CREATE PUBLICATION p FOR TABLE k;",
    );
    let db = cluster.psql();
    let _let_go = LetGo(&db);
    let cdc = Cdc {
        dsn: cluster.dsn("postgres"),
        slot: "watermark",
        publication: "p",
        dir: &dir,
    };
    let gate = Gate(dir.file("gate"));
    let sink = lines_sink(&cdc);
    let mut running = chunked(
        &cdc,
        &sink,
        "public.k",
        "10",
        &gate,
        Some("after-chunk-delivered"),
    );
    gate.pass(&mut running);
    wait_line(
        &cdc,
        "public.k",
        "20",
        &mut running,
        "the first chunk (2..20)",
    );
    // Before the second read: U (a row already delivered) commits first and stays invisible,
    // T (a row of the second chunk's range) commits after it, visible. The second chunk's
    // snapshot sees T, not U; the stream delivers the chunk at U, then meets T.
    hold_commits(&db);
    let u = held_commit(&db, "UPDATE k SET v = 'u' WHERE id = 2;");
    db.run("SET synchronous_commit = local; INSERT INTO k VALUES (23, 't');")
        .unwrap();
    gate.pass(&mut running);
    crashed(running, "after-chunk-delivered");
    alter_system(&db, "RESET synchronous_standby_names").unwrap();
    assert!(u.wait_with_output().unwrap().status.success());
    let mut running = cdc.spawn(&[]);
    wait_chunks_done(&cdc, &mut running);
    db.run("INSERT INTO k VALUES (1000, 'last');").unwrap();
    wait_line(&cdc, "public.k", "1000", &mut running, "the last change");
    running.interrupt();
    assert_k_replays(&db, &cdc);
}

/// Items 9 and 19: killed after a chunk's rows and the sink's position committed in a replica
/// and before the state file recorded the chunk: the replica is ahead of the state file. The
/// restarted run takes the chunks' progress from the replica's own record (committed with the
/// rows), instead of reading the chunk again into a storage that already holds it and
/// stopping with "already holds ... run with --repair" (the fresh machine's failure of
/// `replica.rs`, whose `--repair` run was killed at a moment like this one).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_kill_between_a_chunks_sink_commit_and_the_state_resumes_from_the_replica() {
    let slot = "rowid_windows_ahead";
    let src = database("rowid_cdc_windows_ahead", slot);
    let target = database("rowid_cdc_windows_ahead_target", "none");
    let _drop = DropSlot(&src, slot);
    let dir = Dir::new("windows-ahead");
    src.run(
        "CREATE EXTENSION pg_trickle_ext; SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE k (id int8 PRIMARY KEY, v text);
         INSERT INTO k SELECT g, 'r' || g FROM generate_series(1, 100) g;
         CREATE PUBLICATION p FOR TABLE k;",
    )
    .unwrap();
    let cdc = Cdc {
        dsn: src.dsn(),
        slot,
        publication: "p",
        dir: &dir,
    };
    let sink = format!("replica:{}", target.dsn());
    let chunked = ["--snapshot-table", "public.k", "--snapshot-chunk", "10"];
    let mut first = vec!["--create-slot"];
    first.extend(chunked);
    // The second sink commit is the second chunk's, at its watermark.
    let running = Running(
        cdc.command_into(&sink, &first)
            .env("ROWID_CDC_TEST_CRASH", "after-sink-commit#2")
            .spawn()
            .unwrap(),
    );
    crashed(running, "after-sink-commit");
    assert_eq!(one(&target, "SELECT count(*) FROM public.k;"), "20");
    src.run("UPDATE k SET v = v || '+' WHERE id IN (5, 15, 55); INSERT INTO k VALUES (150, 'x');")
        .unwrap();
    let mut running = Running(cdc.command_into(&sink, &[]).spawn().unwrap());
    wait_for(
        &target,
        "SELECT count(*) FROM public.k WHERE id = 150;",
        "1",
        &mut running,
        "the rows after the kill never arrived",
    );
    running.interrupt();
    let rows = |db: &Psql| db.run("SELECT id, v FROM public.k ORDER BY id;").unwrap();
    assert_eq!(rows(&target), rows(&src), "the replica is its source");
}

/// Item 2: under REPLICA IDENTITY DEFAULT, an update moving a row's key from above the rows
/// copied so far to below them, leaving its TOASTed column alone: the stream does not carry
/// that column's value (`u`), and the consumer never had the row. The replica must hold the
/// value (before the fix the row was inserted with NULL in it).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_key_moved_into_the_copied_rows_keeps_its_toasted_value() {
    let slot = "rowid_windows_toast";
    let src = database("rowid_cdc_windows_toast", slot);
    let target = database("rowid_cdc_windows_toast_target", "none");
    let _drop = DropSlot(&src, slot);
    let dir = Dir::new("windows-toast");
    src.run(
        "CREATE EXTENSION pg_trickle_ext; SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE t (id int8 PRIMARY KEY, doc text, n int4);
         ALTER TABLE t ALTER COLUMN doc SET STORAGE EXTERNAL;
         INSERT INTO t SELECT g, repeat(md5(g::text), 200), g FROM generate_series(1, 100) g;
         CREATE PUBLICATION p FOR TABLE t;",
    )
    .unwrap();
    let cdc = Cdc {
        dsn: src.dsn(),
        slot,
        publication: "p",
        dir: &dir,
    };
    let gate = Gate(dir.file("gate"));
    let sink = format!("replica:{}", target.dsn());
    let mut running = chunked(&cdc, &sink, "public.t", "10", &gate, None);
    gate.pass(&mut running);
    wait_for(
        &target,
        "SELECT count(*) FROM public.t;",
        "10",
        &mut running,
        "the first chunk",
    );
    // Row 50 (not copied yet) moves to key 0 (below the copied rows); doc is left alone.
    src.run("UPDATE t SET id = 0, n = -1 WHERE id = 50;")
        .unwrap();
    let open = gate.open();
    src.run("INSERT INTO t VALUES (1000, 'last', 0);").unwrap();
    wait_for(
        &target,
        "SELECT count(*) FROM public.t;",
        "101",
        &mut running,
        "every row",
    );
    open.store(true, std::sync::atomic::Ordering::Relaxed);
    running.interrupt();
    let rows = |db: &Psql| {
        db.run("SELECT id, md5(coalesce(doc, 'NULL')), n FROM public.t ORDER BY id;")
            .unwrap()
    };
    assert_eq!(rows(&target), rows(&src), "the replica is its source");
}

/// Issue 51 item 6 (the fresh-machine failure of `chunked_snapshots_follow_ddl`): the stream
/// reaches a table's new shape (a column renamed) while the server is already one DDL further
/// (another column dropped). A chunk read for the shape the stream stands at must wait for the
/// stream, never name a column that is gone: the read prepared its statements for the new
/// shape before checking the shape under its snapshot, the prepare failed with `column "a"
/// does not exist`, and the run stopped (the test, seeing only the state file, waited 180 s
/// for "chunks not done"). Here the consumer is held before each chunk's read: read 2 is asked
/// before both DDLs (its shape is stale), read 3 after the rename and a large transaction that
/// keeps the stream before the drop.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_column_dropped_ahead_of_the_stream_is_waited_for() {
    let slot = "rowid_windows_dropped";
    let src = database("rowid_cdc_windows_dropped", slot);
    let _drop = DropSlot(&src, slot);
    let dir = Dir::new("windows-dropped");
    src.run(
        "CREATE EXTENSION pg_trickle_ext; SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE k (id int8 PRIMARY KEY, a int4, b text, v text);
         INSERT INTO k SELECT g, g, 'b' || g, 'r' || g FROM generate_series(1, 50) g;
         CREATE TABLE bulk (x int8);
         CREATE PUBLICATION p FOR TABLE k, bulk;",
    )
    .unwrap();
    let cdc = Cdc {
        dsn: src.dsn(),
        slot,
        publication: "p",
        dir: &dir,
    };
    let gate = Gate(dir.file("gate"));
    let mut running = chunked(&cdc, &lines_sink(&cdc), "public.k", "10", &gate, None);
    gate.pass(&mut running);
    wait_line(&cdc, "public.k", "10", &mut running, "the first chunk");
    // Held before read 2, asked in the first shape: the rename, a transaction the stream
    // takes a while over, the drop.
    src.run(
        "ALTER TABLE k RENAME COLUMN b TO bb;
         INSERT INTO bulk SELECT g FROM generate_series(1, 200000) g;
         ALTER TABLE k DROP COLUMN a;",
    )
    .unwrap();
    // Read 2: stale (both DDLs committed). Read 3: asked once the stream passed the rename
    // and the large transaction, before the drop.
    gate.pass(&mut running);
    gate.pass(&mut running);
    let open = gate.open();
    src.run("INSERT INTO k (id, v) VALUES (1000, 'last');")
        .unwrap();
    wait_chunks_done(&cdc, &mut running);
    wait_line(&cdc, "public.k", "1000", &mut running, "the last change");
    open.store(true, std::sync::atomic::Ordering::Relaxed);
    running.interrupt();
    assert_k_replays(&src, &cdc);
}
