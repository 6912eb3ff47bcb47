//! The `rowid-cdc` command against a live slot: a workload of inserts, key-changing updates,
//! deletes and TOASTed keyless rows runs while the consumer is killed with SIGKILL again and
//! again (18 times) and restarted from its state file, and while the server crashes under it
//! twice (it reconnects on its own): 10^5 changes. What it leaves equals, change for change
//! and transaction id for transaction id, what an audit trigger recorded with
//! `encode_row_id_v2` in the same transactions: nothing lost, nothing twice. Run twice: into
//! a JSON-lines file, and into a PostgreSQL change buffer on the same server (whose
//! connection the crashes end too).
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rowid_testkit::psql::Psql;

const DB: &str = "rowid_cdc_live";

/// A fresh database `db` on the test server.
fn database(db: &str) -> Psql {
    Psql::fresh_database(db).unwrap()
}

/// Where the consumer writes.
enum Kind {
    /// JSON lines into `changes.jsonl`.
    File,
    /// Rows into the default change buffer of another database on the same server.
    Buffer(Psql),
}

/// (xid, op, old identity, new identity) of a change.
type Change = (String, String, String, String);

/// A running consumer, killed when dropped (a failed assertion leaves no process behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Consumer {
    dsn: String,
    dir: PathBuf,
    kind: Kind,
}

impl Consumer {
    fn start(&self, create: bool) -> Running {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rowid-cdc"));
        c.args([
            "--dsn",
            &self.dsn,
            "--slot",
            "rowid_cdc_live_slot",
            "--publication",
            "live",
        ])
        .arg("--state")
        .arg(self.dir.join("cdc.state"))
        .arg("--sink")
        .arg(match &self.kind {
            Kind::File => format!("jsonl:{}", self.dir.join("changes.jsonl").display()),
            Kind::Buffer(sink) => format!("postgres:{}", sink.dsn()),
        })
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        if create {
            c.arg("--create-slot");
        }
        Running(c.spawn().unwrap())
    }

    /// What the sink holds, in commit order (empty while the server recovers).
    fn changes(&self) -> Vec<Change> {
        match &self.kind {
            Kind::File => {
                // The consumer may be in the middle of writing a line: only complete lines.
                let text =
                    std::fs::read_to_string(self.dir.join("changes.jsonl")).unwrap_or_default();
                let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
                complete.lines().map(change).collect()
            }
            Kind::Buffer(sink) => sink
                .buffer_rows(
                    "pgtrickle_changes",
                    "rowid_cdc",
                    "xid, CASE op WHEN 'I' THEN 'insert' WHEN 'U' THEN 'update' \
                     WHEN 'D' THEN 'delete' ELSE 'truncate' END, \
                     coalesce(encode(__pgt_old_row_id, 'hex'), ''), \
                     coalesce(encode(__pgt_row_id, 'hex'), '')",
                )
                .unwrap_or_default()
                .lines()
                .map(split4)
                .collect(),
        }
    }
}

fn split4(line: &str) -> Change {
    let mut p = line.split('|');
    let mut next = || p.next().unwrap_or("").to_string();
    (next(), next(), next(), next())
}

/// Waits until the slot has no walsender (a killed consumer's session ends on the server a
/// moment later).
fn wait_slot_free(psql: &Psql) {
    let t = Instant::now();
    while psql
        .run("SELECT active FROM pg_replication_slots WHERE slot_name = 'rowid_cdc_live_slot';")
        .unwrap()
        .trim()
        == "t"
    {
        assert!(t.elapsed() < Duration::from_secs(30), "slot stays active");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Crashes the server under the consumer: SIGKILL to the walsender serving the slot makes the
/// postmaster end every session and recover from the WAL, as after `pg_ctl -m immediate`.
/// Returns once the server accepts connections again; the consumer keeps running and must
/// reconnect by itself.
fn crash_server(psql: &Psql) {
    let t = Instant::now();
    let pid = loop {
        let pid = psql
            .run("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'rowid_cdc_live_slot';")
            .unwrap();
        if !pid.trim().is_empty() {
            break pid.trim().to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the consumer never connected"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let status = Command::new("kill").args(["-9", &pid]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
    let t = Instant::now();
    // Crash recovery: refused until the server is back.
    std::thread::sleep(Duration::from_millis(200));
    while psql.run("SELECT 1;").is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the server did not come back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (xid, op, old, new) of a JSON line.
fn change(line: &str) -> Change {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    (v["xid"].to_string(), s("op"), s("old_id"), s("new_id"))
}

fn setup(psql: &Psql) {
    psql.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE lv_k (id int8 PRIMARY KEY, v int);
         CREATE TABLE lv_full (a int4, big text, n int);
         ALTER TABLE lv_full ALTER COLUMN big SET STORAGE EXTERNAL;
         ALTER TABLE lv_full REPLICA IDENTITY FULL;
         CREATE PUBLICATION live FOR TABLE lv_k, lv_full;
         -- The audit: each change's identities, computed in its own transaction.
         CREATE TABLE lv_audit (seq bigserial, op text, old_id bytea, new_id bytea,
           xid bigint DEFAULT txid_current() % 4294967296);
         CREATE FUNCTION lv_audit_k() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO lv_audit (op, old_id, new_id) VALUES (lower(TG_OP),
             CASE WHEN TG_OP <> 'INSERT' THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(OLD.id)) END,
             CASE WHEN TG_OP <> 'DELETE' THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(NEW.id)) END);
           RETURN NULL;
         END $$;
         CREATE FUNCTION lv_audit_full() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO lv_audit (op, old_id, new_id) VALUES (lower(TG_OP),
             CASE WHEN TG_OP <> 'INSERT' THEN pgtrickle.encode_row_id_v2('KEYLESS_ROW', OLD) END,
             CASE WHEN TG_OP <> 'DELETE' THEN pgtrickle.encode_row_id_v2('KEYLESS_ROW', NEW) END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER lv_k_audit AFTER INSERT OR UPDATE OR DELETE ON lv_k
           FOR EACH ROW EXECUTE FUNCTION lv_audit_k();
         CREATE TRIGGER lv_full_audit AFTER INSERT OR UPDATE OR DELETE ON lv_full
           FOR EACH ROW EXECUTE FUNCTION lv_audit_full();",
    )
    .unwrap();
}

/// One round of the workload: 50 small transactions, one of 4,900 rows, and a TOASTed
/// keyless row inserted and updated.
fn workload(round: i64) -> String {
    let mut w = String::new();
    let base = round * 10_000;
    for i in 0..50 {
        let id = base + i;
        w.push_str(&format!("INSERT INTO lv_k VALUES ({id}, 0);\n"));
        if i % 3 == 0 {
            w.push_str(&format!(
                "UPDATE lv_k SET id = {} WHERE id = {id};\n",
                id + 500
            ));
        } else if i % 3 == 1 {
            w.push_str(&format!("UPDATE lv_k SET v = v + 1 WHERE id = {id};\n"));
        } else {
            w.push_str(&format!("DELETE FROM lv_k WHERE id = {id};\n"));
        }
    }
    w.push_str(&format!(
        "INSERT INTO lv_k SELECT g, 1 FROM generate_series({}, {}) g;\n",
        base + 1000,
        base + 5899
    ));
    // A keyless row with a TOASTed value, updated through a sibling column.
    w.push_str(&format!(
        "INSERT INTO lv_full VALUES ({round}, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) g), 0);
         UPDATE lv_full SET n = n + 1 WHERE a = {round};\n"
    ));
    w
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn nothing_is_lost_or_repeated_across_kills() {
    // One after the other: both crash the server.
    run(Kind::File);
    run(Kind::Buffer(database("rowid_cdc_live_sink")));
}

fn run(kind: Kind) {
    let psql = database(DB);
    setup(&psql);
    let dir = std::env::temp_dir().join(format!("rowid-cdc-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let label = match kind {
        Kind::File => "JSON lines",
        Kind::Buffer(_) => "change buffer",
    };
    let consumer = Consumer {
        dsn: psql.dsn(),
        dir: dir.clone(),
        kind,
    };

    let mut child = consumer.start(true);
    // Wait for the slot before writing anything.
    let t = Instant::now();
    while psql
        .run("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'rowid_cdc_live_slot';")
        .unwrap()
        .trim()
        != "1"
    {
        assert!(t.elapsed() < Duration::from_secs(30), "no slot");
        std::thread::sleep(Duration::from_millis(50));
    }
    // 20 rounds of about 5,000 changes: 10^5 changes, 18 kills, 2 server crashes.
    let rounds = 20;
    for round in 0..rounds {
        psql.run(&workload(round)).unwrap();
        std::thread::sleep(Duration::from_millis(30 * (round as u64 % 4)));
        if round == 6 || round == 13 {
            // The server crashes under it: it reconnects with backoff on its own.
            crash_server(&psql);
            assert!(
                child.0.try_wait().unwrap().is_none(),
                "the consumer survives a server crash"
            );
        } else {
            // Kill it wherever it is, restart it from its state file.
            drop(child);
            wait_slot_free(&psql);
            child = consumer.start(false);
        }
    }
    let expected: Vec<Change> = psql
        .run("SELECT xid, op, coalesce(encode(old_id, 'hex'), ''), coalesce(encode(new_id, 'hex'), '') FROM lv_audit ORDER BY seq;")
        .unwrap()
        .lines()
        .map(split4)
        .collect();
    let t = Instant::now();
    while consumer.changes().len() < expected.len() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "only {} of {} changes arrived",
            consumer.changes().len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(child);
    let got = consumer.changes();
    eprintln!(
        "live ({label}): {} changes captured across 18 kills and 2 server crashes, {} expected",
        got.len(),
        expected.len()
    );
    assert_eq!(got.len(), expected.len(), "no change twice");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "change {i}");
    }
    assert!(
        got.iter().any(|(_, op, o, n)| op == "update" && o != n),
        "key changes were captured"
    );
    wait_slot_free(&psql);
    psql.run("SELECT pg_drop_replication_slot('rowid_cdc_live_slot');")
        .unwrap();
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
