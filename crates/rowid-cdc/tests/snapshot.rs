//! The initial snapshot (`--create-slot --snapshot`) against a live server: tables written
//! to by another session before, during and after the snapshot (inserts, updates, deletes,
//! key changes; a keyless table with duplicate rows). Replaying the snapshot rows and then
//! the stream into a multiset gives each table exactly as it is at the end: no row missing,
//! none twice. And a run killed during the copy is refused at restart, naming the fix (the
//! snapshot the copy was read under is gone: it cannot resume).
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{Cdc, Dir, DropSlot, database, wait_active};
use rowid_testkit::psql::Psql;
use serde_json::Value;

/// The tests share the server's WAL: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Another session's writes: `rounds` transactions, each an update, a delete, an insert and
/// a key change on `keyed`, and a duplicate inserted into and one deleted from `bag`, 3 ms
/// apart (the workload lasts seconds, so the slot is created in its middle).
fn writes(rounds: u32, seed: u32) -> String {
    format!(
        "DO $$
         DECLARE r int;
         BEGIN
           FOR i IN 1..{rounds} LOOP
             r := ((i * 7919 + {seed}) % 20000) + 1;
             UPDATE keyed SET v = v + 1 WHERE id = r;
             DELETE FROM keyed WHERE id = r + 1;
             INSERT INTO keyed VALUES (1000000 + i + {seed} * 100000, i) ON CONFLICT DO NOTHING;
             UPDATE keyed SET id = id + 2000000 WHERE id = r + 2;
             INSERT INTO bag VALUES (r % 50, 'dup');
             DELETE FROM bag WHERE ctid = (SELECT ctid FROM bag WHERE x = (r + 7) % 50 LIMIT 1);
             COMMIT;
             PERFORM pg_sleep(0.003);
           END LOOP;
         END $$;"
    )
}

/// A multiset of rows, each as its JSON image text.
type Multiset = BTreeMap<String, i64>;

fn add(m: &mut Multiset, image: &Value, by: i64) {
    let key = image.to_string();
    let n = m.entry(key.clone()).or_insert(0);
    *n += by;
    if *n == 0 {
        m.remove(&key);
    }
}

/// The rows of `table` at the end, as the images would write them (`keyed`: id as int8's
/// string, v as a number; `bag`: x as a number, y as a string).
fn table_now(db: &Psql, table: &str) -> Multiset {
    let sql = match table {
        "keyed" => "SELECT json_build_object('id', id::text, 'v', v)::text FROM keyed",
        _ => "SELECT json_build_object('x', x, 'y', y)::text FROM bag",
    };
    let mut m = Multiset::new();
    for line in db.run(&format!("{sql};")).unwrap().lines() {
        let v: Value = serde_json::from_str(line.trim()).unwrap();
        add(&mut m, &v, 1);
    }
    m
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn snapshot_and_stream_replay_to_the_table() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_snapshot", "snap");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE keyed (id int8 PRIMARY KEY, v int4);
         INSERT INTO keyed SELECT g, 0 FROM generate_series(1, 50000) g;
         CREATE TABLE bag (x int4, y text);
         ALTER TABLE bag REPLICA IDENTITY FULL;
         INSERT INTO bag SELECT g % 50, 'dup' FROM generate_series(1, 5000) g;
         CREATE TABLE marker (id int4 PRIMARY KEY);
         CREATE PUBLICATION snap FOR TABLE keyed, bag, marker;",
    )
    .unwrap();
    let _drop_slot = DropSlot(&db, "snap");
    let dir = Dir::new("snapshot");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "snap",
        publication: "snap",
        dir: &dir,
    };
    // Writes run before the slot exists, while its snapshot is copied, and after.
    let args = db.args();
    let writer = std::thread::spawn(move || {
        let db = Psql::new("psql", &args);
        for seed in 0..6 {
            db.run(&writes(300, seed)).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let _running = cdc.spawn(&["--create-slot", "--snapshot", "--progress"]);
    wait_active(&db, "snap");
    writer.join().unwrap();
    db.run("INSERT INTO marker VALUES (1);").unwrap();
    // Wait for the marker: everything before it was delivered.
    let t = Instant::now();
    let lines = loop {
        let lines = cdc.lines();
        if lines.iter().any(|l| l["relation"] == "public.marker") {
            break lines;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "no marker line");
        std::thread::sleep(Duration::from_millis(100));
    };
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("cdc.state")).unwrap()).unwrap();
    assert_eq!(state["snapshot"], "done");
    // Every snapshot row comes before the first change of the stream.
    let first_change = lines.iter().position(|l| l["op"] != "snapshot").unwrap();
    assert!(lines[first_change..].iter().all(|l| l["op"] != "snapshot"));
    let snapshot_rows = first_change;
    assert!(snapshot_rows >= 50_000, "{snapshot_rows} snapshot rows");
    // The slot was created in the middle of the workload: the snapshot holds rows the writer
    // inserted before it, and the stream the writer's changes after it.
    let written_before = lines[..snapshot_rows]
        .iter()
        .filter(|l| l["new"]["id"].as_str().is_some_and(|id| id.len() >= 7))
        .count();
    let changes_after = lines.len() - snapshot_rows - 1;
    eprintln!(
        "{snapshot_rows} snapshot rows ({written_before} of them written by the workload), \
         {changes_after} changes after them"
    );
    assert!(
        written_before > 0 && changes_after > 100,
        "the snapshot did not cut the workload: {written_before} written rows in it, \
         {changes_after} changes after it"
    );
    // keyed: one row per id (the old image, when sent, has the key); bag: a multiset of
    // whole rows (REPLICA IDENTITY FULL: the old image is the row).
    let mut keyed: BTreeMap<String, Value> = BTreeMap::new();
    let mut bag = Multiset::new();
    for l in &lines {
        let op = l["op"].as_str().unwrap();
        match l["relation"].as_str().unwrap() {
            "public.keyed" => {
                let old_id = |l: &Value| {
                    let image = if l["old"].is_null() {
                        &l["new"]
                    } else {
                        &l["old"]
                    };
                    image["id"].as_str().unwrap().to_string()
                };
                match op {
                    "snapshot" | "insert" => {
                        let id = l["new"]["id"].as_str().unwrap().to_string();
                        assert!(keyed.insert(id, l["new"].clone()).is_none(), "twice: {l}");
                    }
                    "update" => {
                        assert!(
                            keyed.remove(&old_id(l)).is_some(),
                            "an update of nothing: {l}"
                        );
                        let id = l["new"]["id"].as_str().unwrap().to_string();
                        keyed.insert(id, l["new"].clone());
                    }
                    "delete" => {
                        assert!(
                            keyed.remove(&old_id(l)).is_some(),
                            "a delete of nothing: {l}"
                        );
                    }
                    other => panic!("unexpected {other}: {l}"),
                }
            }
            "public.bag" => match op {
                "snapshot" | "insert" => add(&mut bag, &l["new"], 1),
                "delete" => add(&mut bag, &l["old"], -1),
                "update" => {
                    add(&mut bag, &l["old"], -1);
                    add(&mut bag, &l["new"], 1);
                }
                other => panic!("unexpected {other}: {l}"),
            },
            _ => {}
        }
    }
    let mut replay: BTreeMap<String, Multiset> = BTreeMap::new();
    let mut k = Multiset::new();
    for v in keyed.values() {
        add(&mut k, v, 1);
    }
    replay.insert("keyed".into(), k);
    replay.insert("bag".into(), bag);
    for table in ["keyed", "bag"] {
        let want = table_now(&db, table);
        let got = replay.remove(table).unwrap_or_default();
        let missing: Vec<_> = want
            .iter()
            .filter(|(k, n)| got.get(*k) != Some(n))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(k, n)| want.get(*k) != Some(n))
            .take(5)
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{table}: {} rows in the table, {} replayed; differing: {missing:?} / {extra:?}",
            want.values().sum::<i64>(),
            got.values().sum::<i64>()
        );
    }
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_snapshot_killed_during_the_copy_is_refused_at_restart() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_snapshot_kill", "snap_kill");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE a (id int4 PRIMARY KEY);
         INSERT INTO a SELECT generate_series(1, 100);
         CREATE TABLE z (id int4 PRIMARY KEY);
         INSERT INTO z SELECT generate_series(1, 500000);
         CREATE PUBLICATION snap_kill FOR TABLE a, z;",
    )
    .unwrap();
    let _drop_slot = DropSlot(&db, "snap_kill");
    let dir = Dir::new("snapshot-kill");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "snap_kill",
        publication: "snap_kill",
        dir: &dir,
    };
    // z takes seconds to copy (half a million rows into the JSON-lines file): the run is
    // killed once the state says pending and the copy has begun.
    let running = cdc.spawn(&["--create-slot", "--snapshot"]);
    let t = Instant::now();
    loop {
        let state = std::fs::read_to_string(dir.file("cdc.state")).unwrap_or_default();
        if state.contains("\"snapshot\":\"pending\"") && cdc.lines().len() >= 100 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "never pending: {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGKILL: no chance to clean up.
    let pid = running.0.id().to_string();
    Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    drop(running);
    let state = std::fs::read_to_string(dir.file("cdc.state")).unwrap();
    assert!(
        state.contains("\"snapshot\":\"pending\""),
        "killed after the copy: {state}"
    );
    let out = cdc.run(&["--create-slot", "--snapshot"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a restart after a half snapshot ran: {err}"
    );
    assert!(
        err.contains("interrupted") && err.contains("pg_drop_replication_slot('snap_kill')"),
        "{err}"
    );
    // And without --snapshot too: the state says what happened, whatever the command line.
    let out = cdc.run(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
}
