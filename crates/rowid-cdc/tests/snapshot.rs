//! The initial snapshot (`--create-slot --snapshot`) against a live server: tables written
//! to by another session before, during and after the snapshot (inserts, updates, deletes,
//! key changes; a keyless table with duplicate rows). The keyed table is read in chunks while
//! the stream runs, the keyless one copied under the slot's exported snapshot. Replaying the
//! snapshot rows and the stream in the order they arrive gives each table exactly as it is at
//! the end: no row missing, none twice, no update or delete of a row not delivered. A run
//! killed during the keyless copy is refused at restart, naming the fix (the snapshot the copy
//! was read under is gone); one killed, several times, during the chunks (crashed at a named
//! point inside each window between a chunk's delivery and its watermark and between the
//! sink's write and the state file's, and killed at random) resumes at the last delivered
//! chunk and still replays exactly.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{Cdc, Dir, DropSlot, Running, database, wait_active};
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

/// Replays JSON lines: `keyed` by identity, strictly (an insert or snapshot row of an identity
/// already there, an update or delete of one that is not, fails), `bag` as a multiset.
fn replay(lines: &[Value]) -> (BTreeMap<String, Value>, Multiset) {
    let mut keyed: BTreeMap<String, Value> = BTreeMap::new();
    let mut bag = Multiset::new();
    for l in lines {
        let op = l["op"].as_str().unwrap();
        match l["relation"].as_str().unwrap() {
            "public.keyed" => apply_keyed(&mut keyed, l),
            "public.bag" => match op {
                "truncate" => bag.clear(),
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
    (keyed, bag)
}

/// Replays one line of a keyed table by identity, strictly: a snapshot row or insert of an
/// identity already there, an update or delete of one that is not, fails.
fn apply_keyed(rows: &mut BTreeMap<String, Value>, l: &Value) {
    let id = |k: &str| l[k].as_str().unwrap().to_string();
    match l["op"].as_str().unwrap() {
        // Also what opens a table's snapshot in chunks.
        "truncate" => rows.clear(),
        "snapshot" | "insert" => {
            assert!(
                rows.insert(id("new_id"), l["new"].clone()).is_none(),
                "twice: {l}"
            );
        }
        "update" => {
            assert!(
                rows.remove(&id("old_id")).is_some(),
                "an update of nothing: {l}"
            );
            assert!(
                rows.insert(id("new_id"), l["new"].clone()).is_none(),
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

/// Compares a replayed table with the table now.
fn assert_equal(db: &Psql, table: &str, got: &Multiset) {
    assert_same(table, &table_now(db, table), got);
}

/// Compares a replayed multiset with the table's.
fn assert_same(table: &str, want: &Multiset, got: &Multiset) {
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

/// The keyed rows of a replay as a multiset of images.
fn images(keyed: &BTreeMap<String, Value>) -> Multiset {
    let mut m = Multiset::new();
    for v in keyed.values() {
        add(&mut m, v, 1);
    }
    m
}

/// Waits until every chunked table of the state is done and the marker line arrived.
fn wait_done(cdc: &Cdc<'_>, dir: &Dir, running: &mut Running) -> Vec<Value> {
    wait_done_without_marker(dir, running);
    let t = Instant::now();
    loop {
        let lines = cdc.lines();
        if lines.iter().any(|l| l["relation"] == "public.marker") {
            return lines;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no marker line");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Another session running `writes(300, seed)` for each seed below `seeds`.
fn spawn_writes(db: &Psql, seeds: u32) -> std::thread::JoinHandle<()> {
    let args = db.args();
    std::thread::spawn(move || {
        let db = Psql::new("psql", &args);
        for seed in 0..seeds {
            db.run(&writes(300, seed)).unwrap();
        }
    })
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
    let writer = spawn_writes(&db, 6);
    std::thread::sleep(Duration::from_millis(300));
    let mut running = cdc.spawn(&["--create-slot", "--snapshot", "--progress"]);
    wait_active(&db, "snap");
    writer.join().unwrap();
    // After the chunks: the marker's insert is the last change the test waits for.
    wait_done_without_marker(&dir, &mut running);
    db.run("INSERT INTO marker VALUES (1);").unwrap();
    let lines = wait_done(&cdc, &dir, &mut running);
    // The copy's progress: a line as each table begins (the keyless one first, the keyed
    // ones after it), then the last one.
    let err = running.interrupt();
    for (i, table) in ["public.bag", "public.keyed", "public.marker"]
        .iter()
        .enumerate()
    {
        assert!(
            err.contains(&format!(
                "tables done, now {table} ({} of 3); about ",
                i + 1
            )) && err.contains("rows of 3 tables in "),
            "{err}"
        );
    }
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("cdc.state")).unwrap()).unwrap();
    assert_eq!(state["snapshot"], "done", "the copy");
    // Every table is copied at the slot's consistent point: all snapshot rows come before
    // the stream's first change (the keyed table's last, in key order).
    let first_change = lines.iter().position(|l| l["op"] != "snapshot").unwrap();
    assert!(lines[first_change..].iter().all(|l| l["op"] != "snapshot"));
    let keyed_ids: Vec<i64> = lines[..first_change]
        .iter()
        .filter(|l| l["relation"] == "public.keyed")
        .map(|l| l["new"]["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        keyed_ids.windows(2).all(|w| w[0] < w[1]),
        "keyed rows in key order"
    );
    let changes = lines.len() - first_change;
    eprintln!("{} keyed snapshot rows, {changes} changes", keyed_ids.len());
    assert!(
        keyed_ids.len() >= 40_000 && changes > 100,
        "{} / {changes}",
        keyed_ids.len()
    );
    let (keyed, bag) = replay(&lines);
    assert_equal(&db, "keyed", &images(&keyed));
    assert_equal(&db, "bag", &bag);
}

/// Waits (up to 3 minutes) until the state says every chunked table is done.
fn wait_done_without_marker(dir: &Dir, running: &mut Running) -> Value {
    let t = Instant::now();
    loop {
        let state: Value = std::fs::read_to_string(dir.file("cdc.state"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null);
        if state["chunks"]["cursors"]
            .as_array()
            .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c["done"] == true))
        {
            return state;
        }
        // A run that stopped is reported at once, with what it printed (the fresh-machine
        // failure of issue 51 item 6 was a run stopped by an error, seen as this wait's
        // timeout 180 s later).
        if t.elapsed() > Duration::from_secs(180) || running.0.try_wait().unwrap().is_some() {
            panic!("chunks not done: {state}\n{}", running.kill_and_report());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 3 * 10^5 keyed rows while another session inserts, updates, deletes and changes keys: the
/// consumer is SIGKILLed first during the initial copy in key order (after a checkpoint), then
/// several times while it goes on in chunks of 500 while streaming, and restarted each time:
/// it resumes at the last checkpoint or delivered chunk, and the replay (strict, by identity)
/// equals the table.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn chunked_snapshots_survive_kills_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_snapshot_chunks", "snap_chunks");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE keyed (id int8 PRIMARY KEY, v int4);
         INSERT INTO keyed SELECT g, 0 FROM generate_series(1, 300000) g;
         CREATE TABLE bag (x int4, y text);
         ALTER TABLE bag REPLICA IDENTITY FULL;
         CREATE TABLE marker (id int4 PRIMARY KEY);
         CREATE PUBLICATION snap_chunks FOR TABLE keyed, bag, marker;",
    )
    .unwrap();
    let _drop_slot = DropSlot(&db, "snap_chunks");
    let dir = Dir::new("snapshot-chunks");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "snap_chunks",
        publication: "snap_chunks",
        dir: &dir,
    };
    let writer = spawn_writes(&db, 10);
    // And a hot writer on the first rows, one-row transactions back to back: changes that
    // commit between a chunk's read and its watermark, which the chunk did not see. It runs
    // in bursts until the kills are over: the crash point "a chunk delivered at such a
    // change" needs such changes while chunks remain (a fixed number of them ran out first
    // on a fresh machine: the second run read every chunk without passing the point, and the
    // test ended after two kills), and the pauses let chunks be read (under writes without
    // pause no chunk is read at all: noted on issue 36's closing note, a separate problem).
    let args = db.args();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hot_stop = stop.clone();
    let hot = std::thread::spawn(move || {
        let db = Psql::new("psql", &args);
        let mut round = 0u64;
        while !hot_stop.load(std::sync::atomic::Ordering::Relaxed) {
            db.run(&format!(
                "DO $$ BEGIN FOR i IN 1..100 LOOP
                   UPDATE keyed SET v = v + 1 WHERE id = ((i + {}) * 37) % 3000 + 1;
                   COMMIT;
                 END LOOP; END $$;",
                round * 100
            ))
            .unwrap();
            round += 1;
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    // The first run copies with a checkpoint every 4096 rows; the later ones resume.
    let first = [
        "--create-slot",
        "--snapshot",
        "--snapshot-checkpoint",
        "0",
        "--snapshot-chunk",
        "500",
    ];
    let chunk = ["--snapshot-chunk", "500"];
    // The first run crashes during the copy, at its third checkpoint (the sink's lines
    // written, the state file not yet): at a fixed point, so that most of the table is left
    // for the chunks. (It was killed once the state recorded a checkpoint; on a loaded
    // machine the copy could nearly finish before the kill landed, leaving fewer chunks than
    // the crash points below need: a fresh-machine run failed so.) The second and third crash
    // inside the windows between two durable steps (`ROWID_CDC_TEST_CRASH`: a chunk
    // delivered and its watermark not arrived; the sink's lines written and the state file
    // not yet); then kills at random once a later position is recorded.
    let crashes = [
        Some("after-sink-commit#3"),
        Some("after-chunk-delivered#2"),
        Some("after-sink-commit#7"),
        None,
        None,
    ];
    let mut kills = 0;
    let mut reached = Vec::new();
    let mut last_after = String::new();
    let state = || -> Value {
        std::fs::read_to_string(dir.file("cdc.state"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    };
    while kills < crashes.len() {
        let mut command = cdc.command(if kills == 0 { &first[..] } else { &chunk[..] });
        if let Some(point) = crashes[kills] {
            command.env("ROWID_CDC_TEST_CRASH", point);
        }
        let mut running = Running(command.spawn().unwrap());
        let t = Instant::now();
        if let Some(point) = crashes[kills] {
            // Until it crashes there (or the chunks end first: then it is killed, and the
            // window was not tested: the assertion after the loop says so).
            let point = point.split('#').next().unwrap();
            // One look at the process per turn: it can end at any moment, and an end is
            // judged by what it printed, never taken for "no crash" by a second look.
            loop {
                if running.0.try_wait().unwrap().is_some() {
                    let err = running.report();
                    assert!(err.contains(&format!("test crash at {point}")), "{err}");
                    reached.push(point);
                    break;
                }
                if state()["chunks"]["cursors"][0]["done"] == true {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "no crash at {point} within 60 s"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        } else {
            // Killed once a position later than the last kill's is recorded (the first time
            // at once: during the copy).
            loop {
                let state = state();
                let after = state["chunks"]["cursors"][0]["view"]["after"]["identity"].to_string();
                if state["chunks"]["cursors"][0]["view"]["after"].is_object() && after != last_after
                {
                    last_after = after;
                    break;
                }
                running.still_within(t, Duration::from_secs(60), "no chunk recorded");
                std::thread::sleep(Duration::from_millis(5));
            }
            if kills > 0 {
                std::thread::sleep(Duration::from_millis(40 * kills as u64));
            }
        }
        let pid = running.0.id().to_string();
        Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        drop(running);
        kills += 1;
        let state = state();
        if kills == 1 {
            // Killed during the copy in key order: the state says where it stands.
            assert_eq!(state["snapshot"], "done", "{state}");
            assert_eq!(
                state["chunks"]["cursors"][0]["done"], false,
                "copied before the kill: {state}"
            );
        }
        if state["chunks"]["cursors"][0]["done"] == true {
            break;
        }
    }
    assert!(kills >= 3, "killed {kills} times before the snapshot ended");
    assert_eq!(
        reached.len(),
        crashes.iter().flatten().count(),
        "crash points reached before the chunks ended: {reached:?} of {crashes:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut running = cdc.spawn(&chunk);
    writer.join().unwrap();
    hot.join().unwrap();
    db.run("INSERT INTO marker VALUES (1);").unwrap();
    let lines = wait_done(&cdc, &dir, &mut running);
    let (keyed, bag) = replay(&lines);
    eprintln!(
        "chunks: {kills} kills, {} lines, {} keyed rows replayed",
        lines.len(),
        keyed.len()
    );
    assert_equal(&db, "keyed", &images(&keyed));
    assert_equal(&db, "bag", &bag);
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_snapshot_killed_during_the_copy_is_refused_at_restart() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_snapshot_kill", "snap_kill");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE a (id int4);
         INSERT INTO a SELECT generate_series(1, 100);
         CREATE TABLE z (id int4);
         INSERT INTO z SELECT generate_series(1, 1000000);
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
    // Keyless tables are copied under the exported snapshot (no key to read them in chunks
    // by). z takes seconds to copy (a million rows into the JSON-lines file): the run is
    // killed once the state says pending and the copy has begun (the file is looked at by
    // its size: parsing it while it grows would let the copy finish first).
    let running = cdc.spawn(&["--create-slot", "--snapshot"]);
    let t = Instant::now();
    loop {
        let state = std::fs::read_to_string(dir.file("cdc.state")).unwrap_or_default();
        let written = std::fs::metadata(dir.file("changes.jsonl")).map_or(0, |m| m.len());
        if state.contains("\"snapshot\":\"pending\"") && written > 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "never pending: {state}"
        );
        std::thread::sleep(Duration::from_millis(5));
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

/// The phases of [`chunked_snapshots_follow_ddl`]'s table: the columns its images carry from
/// that phase's DDL on (`c` as a JSON number while int4, a string once int8).
const PHASES: [&[&str]; 5] = [
    &["a", "b", "id"],
    &["a", "b", "c", "id"],
    &["a", "bb", "c", "id"],
    &["bb", "c", "id"],
    &["bb", "c", "id"],
];

/// Another session's changes of `shaped` around four DDL statements (ADD, RENAME, DROP
/// COLUMN, ALTER COLUMN TYPE), each committed with a row of `phase` naming it.
const SHAPE_WRITES: &str = "DO $$ BEGIN
  FOR i IN 1..150 LOOP
    UPDATE shaped SET a = a + 1 WHERE id = (i::int8 * 7919) % 60000 + 1; COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
  ALTER TABLE shaped ADD COLUMN c int4; INSERT INTO phase VALUES (1); COMMIT;
  FOR i IN 1..150 LOOP
    UPDATE shaped SET c = i WHERE id = (i::int8 * 104729) % 60000 + 1; COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
  ALTER TABLE shaped RENAME COLUMN b TO bb; INSERT INTO phase VALUES (2); COMMIT;
  FOR i IN 1..150 LOOP
    UPDATE shaped SET bb = 'r' || i WHERE id = (i::int8 * 1299709) % 60000 + 1; COMMIT;
    DELETE FROM shaped WHERE id = (i::int8 * 15485863) % 60000 + 1; COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
  ALTER TABLE shaped DROP COLUMN a; INSERT INTO phase VALUES (3); COMMIT;
  FOR i IN 1..150 LOOP
    UPDATE shaped SET id = id + 1000000 WHERE id = (i::int8 * 32452843) % 60000 + 1; COMMIT;
    INSERT INTO shaped (id, bb, c) VALUES (2000000 + i, 'new', i); COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
  ALTER TABLE shaped ALTER COLUMN c TYPE int8; INSERT INTO phase VALUES (4); COMMIT;
  FOR i IN 1..150 LOOP
    UPDATE shaped SET c = c + 10000000000 WHERE id = (i::int8 * 49979687) % 60000 + 1; COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
END $$;";

/// A chunked snapshot while the table's shape changes: every snapshot row is delivered in the
/// shape the stream stands at where it is delivered (a chunk read before a DDL comes before
/// it, one read after it comes after it), and the replay, with each DDL applied to the rows
/// replayed so far at its own position, equals the table.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn chunked_snapshots_follow_ddl() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_snapshot_ddl", "snap_ddl");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE shaped (id int8 PRIMARY KEY, a int4, b text);
         INSERT INTO shaped SELECT g, 0, 'b' || g FROM generate_series(1, 60000) g;
         ANALYZE shaped;
         CREATE TABLE phase (n int4 PRIMARY KEY);
         CREATE PUBLICATION snap_ddl FOR TABLE shaped, phase;",
    )
    .unwrap();
    let _drop_slot = DropSlot(&db, "snap_ddl");
    let dir = Dir::new("snapshot-ddl");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "snap_ddl",
        publication: "snap_ddl",
        dir: &dir,
    };
    // Read in chunks while streaming (an initial --snapshot would copy both tables before
    // the stream starts, so no DDL could fall between its rows); the empty phase table first,
    // so that its markers pass from the start.
    let mut running = cdc.spawn(&[
        "--create-slot",
        "--snapshot-table",
        "public.phase",
        "--snapshot-table",
        "public.shaped",
        "--snapshot-chunk",
        "100",
        "--progress",
    ]);
    wait_active(&db, "snap_ddl");
    db.run(SHAPE_WRITES).unwrap();
    wait_done_without_marker(&dir, &mut running);
    db.run("INSERT INTO phase VALUES (5);").unwrap();
    let t = Instant::now();
    let lines = loop {
        let lines = cdc.lines();
        if lines
            .iter()
            .any(|l| l["relation"] == "public.phase" && l["new"]["n"] == 5)
        {
            break lines;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no end marker");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The progress lines: the first chunk's, with the table's estimate and an ETA, and the
    // last one once both tables are done.
    let err = running.interrupt();
    assert!(
        err.contains("rows in chunks (")
            && err.contains("now public.shaped; about ")
            && err.contains("rows of 2 tables in chunks in "),
        "{err}"
    );
    let mut phase = 0usize;
    let mut snapshot_phases = std::collections::BTreeSet::new();
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    for l in &lines {
        if l["relation"] == "public.phase" {
            if l["op"] == "truncate" {
                // What opens the (empty) table's snapshot in chunks.
                continue;
            }
            phase = l["new"]["n"].as_u64().unwrap() as usize;
            if phase == 5 {
                break;
            }
            // The DDL of this phase, applied to the rows replayed so far.
            for image in rows.values_mut() {
                let o = image.as_object_mut().unwrap();
                match phase {
                    1 => {
                        o.insert("c".into(), Value::Null);
                    }
                    2 => {
                        let b = o.remove("b").unwrap();
                        o.insert("bb".into(), b);
                    }
                    3 => {
                        o.remove("a");
                    }
                    _ => {
                        let c = match &o["c"] {
                            Value::Number(n) => Value::String(n.to_string()),
                            other => other.clone(),
                        };
                        o.insert("c".into(), c);
                    }
                }
            }
            continue;
        }
        assert_eq!(l["relation"], "public.shaped", "{l}");
        let op = l["op"].as_str().unwrap();
        if op == "snapshot" {
            snapshot_phases.insert(phase);
        }
        if op == "truncate" {
            // What opens the table's snapshot in chunks.
            apply_keyed(&mut rows, l);
            continue;
        }
        let image = if op == "delete" { &l["old"] } else { &l["new"] };
        let mut names: Vec<&str> = image
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        if op != "delete" || l["old_image"] == "full" {
            assert_eq!(names, PHASES[phase], "phase {phase}: {l}");
        }
        if phase == 4 && op != "delete" {
            assert!(
                !image["c"].is_number(),
                "int8 c as a number in phase 4: {l}"
            );
        }
        apply_keyed(&mut rows, l);
    }
    eprintln!(
        "ddl: {} lines, snapshot rows delivered in phases {snapshot_phases:?}",
        lines.len()
    );
    assert!(
        snapshot_phases.len() >= 3,
        "the snapshot did not run across the DDL (phases {snapshot_phases:?})"
    );
    // Keys in name order on both sides (the replay's renames reorder them).
    let sorted = |v: &Value| {
        let o: BTreeMap<&String, &Value> = v.as_object().unwrap().iter().collect();
        serde_json::to_value(o).unwrap()
    };
    let mut got = Multiset::new();
    for image in rows.values() {
        add(&mut got, &sorted(image), 1);
    }
    let mut want = Multiset::new();
    let sql = "SELECT json_build_object('id', id::text, 'bb', bb, 'c', c::text)::text FROM shaped;";
    for line in db.run(sql).unwrap().lines() {
        add(
            &mut want,
            &sorted(&serde_json::from_str(line.trim()).unwrap()),
            1,
        );
    }
    assert_same("shaped", &want, &got);
}

/// A DDL that commits after the slot's consistent point and before the copy could lock its
/// table: here `v` retyped from int4 to int8, a rewrite, which is not MVCC-safe: the copy's
/// older snapshot would see the rewritten table empty, and without the check the run went on
/// silently with no rows.
/// rowid-cdc pauses between the slot's creation and the copy (its test hook); the DDL commits
/// once the slot has its consistent point (a slot is listed while it still builds its
/// snapshot, with no `confirmed_flush_lsn`: a DDL started then is waited for and lands before
/// the consistent point, where the copy rightly sees it; CI once ran into that window). The
/// copy is refused, naming the table and the fix, before any row.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_ddl_between_the_slot_and_its_copy_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_snapshot_window", "snap_window");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE w (id int8 PRIMARY KEY, v int4);
         INSERT INTO w SELECT g, g FROM generate_series(1, 1000) g;
         CREATE PUBLICATION snap_window FOR TABLE w;",
    )
    .unwrap();
    let _drop_slot = DropSlot(&db, "snap_window");
    let dir = Dir::new("snapshot-window");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "snap_window",
        publication: "snap_window",
        dir: &dir,
    };
    let args = db.args();
    let ddl = std::thread::spawn(move || {
        Psql::new("psql", &args).run(
            "DO $$ BEGIN
               FOR i IN 1..3000 LOOP
                 EXIT WHEN EXISTS (SELECT 1 FROM pg_replication_slots
                                   WHERE slot_name = 'snap_window'
                                     AND confirmed_flush_lsn IS NOT NULL);
                 PERFORM pg_sleep(0.01);
               END LOOP;
             END $$;
             ALTER TABLE w ALTER COLUMN v TYPE int8;",
        )
    });
    let mut command = cdc.command(&["--create-slot", "--snapshot"]);
    command.env("ROWID_CDC_TEST_PAUSE_BEFORE_COPY_MS", "3000");
    let mut child = command.spawn().unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    ddl.join().unwrap().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("public.w changed (a DDL committed) after the slot's consistent point")
            && err.contains("pg_drop_replication_slot('snap_window')"),
        "{err}"
    );
    assert!(cdc.lines().is_empty(), "no row before the refusal");
}
