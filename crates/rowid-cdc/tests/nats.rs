//! The NATS JetStream sink against a live server and a `nats-server` with JetStream that the
//! test starts: a workload of inserts, key-changing updates and deletes runs while the
//! consumer is SIGKILLed again and again and restarted; the stream then holds every change
//! exactly once, in commit order, equal (transaction, operation, identities) to what an audit
//! trigger recorded with `encode_row_id_v2`, each on its table's subject with its headers.
//! A restart that finds an unfinished transaction older than the stream's de-duplication
//! window allows is refused, naming the stream; so is a stream whose subjects do not hold
//! the sink's.
//!
//! Needs a server with `wal_level = logical` and the extension, and `nats-server` on PATH:
//! run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::Config;
use common::{Cdc, Dir, DropSlot, Running, database, wait_active, wait_free, wait_streaming};
use serde_json::Value;

/// A `nats-server` with JetStream on a free loopback port, killed when dropped.
struct NatsServer {
    child: Child,
    url: String,
    _dir: Dir,
}

impl NatsServer {
    fn start(name: &str) -> NatsServer {
        let dir = Dir::new(&format!("nats-{name}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH (cargo xtask test installs it)");
        let url = format!("nats://127.0.0.1:{port}");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "nats-server never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        NatsServer {
            child,
            url,
            _dir: dir,
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One message read back from the stream.
#[derive(Debug)]
struct Read {
    subject: String,
    headers: Vec<(String, String)>,
    body: Value,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every message of stream `name`, in stream order.
fn read_stream(url: &str, name: &str) -> Vec<Read> {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        let mut stream = js.get_stream(name).await.unwrap();
        let last = stream.info().await.unwrap().state.last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            let m = stream.get_raw_message(seq).await.unwrap();
            let headers = m
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v[0].to_string()))
                .collect();
            out.push(Read {
                subject: m.subject.to_string(),
                headers,
                body: serde_json::from_slice(&m.payload).unwrap(),
            });
        }
        out
    })
}

/// Creates stream `name` with `subjects` and a de-duplication window of `window`.
fn create_stream(url: &str, name: &str, subjects: &[&str], window: Duration) {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        js.create_stream(Config {
            name: name.to_string(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            duplicate_window: window,
            ..Default::default()
        })
        .await
        .unwrap();
    });
}

/// Publishes `body` on `subject` (no id).
fn publish(url: &str, subject: &str, body: &str) {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        js.publish(subject.to_string(), body.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
}

/// The workload: `n` transactions on `nk`, each an insert, an update, a key change and a
/// delete of earlier rows (one session: commit order is the audit's order).
fn workload(n: u32) -> String {
    format!(
        "DO $$
         BEGIN
           FOR i IN 1..{n} LOOP
             INSERT INTO nk VALUES (i * 10, i);
             UPDATE nk SET v = v + 1 WHERE id = (i - 1) * 10;
             IF i % 3 = 0 THEN UPDATE nk SET id = id + 5 WHERE id = (i - 2) * 10; END IF;
             IF i % 4 = 0 THEN DELETE FROM nk WHERE id = (i - 3) * 10; END IF;
             COMMIT;
           END LOOP;
         END $$;"
    )
}

/// Exactly once, in commit order, equal to the audit: a workload with the consumer killed 5
/// times.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn every_change_reaches_the_stream_exactly_once_through_kills() {
    let nats = NatsServer::start("once");
    let db = database("rowid_cdc_nats", "nats_once");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE nk (id int8 PRIMARY KEY, v int4);
         CREATE PUBLICATION nats_once FOR TABLE nk;
         CREATE TABLE audit (seq bigserial, op text, old_id bytea, new_id bytea,
           xid bigint DEFAULT txid_current() % 4294967296);
         CREATE FUNCTION audit_nk() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO audit (op, old_id, new_id) VALUES (lower(TG_OP),
             CASE WHEN TG_OP <> 'INSERT' THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(OLD.id)) END,
             CASE WHEN TG_OP <> 'DELETE' THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(NEW.id)) END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit_nk AFTER INSERT OR UPDATE OR DELETE ON nk
           FOR EACH ROW EXECUTE FUNCTION audit_nk();",
    )
    .unwrap();
    let dir = Dir::new("nats-once");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "nats_once",
        publication: "nats_once",
        dir: &dir,
    };
    let _drop = DropSlot(&db, "nats_once");
    let sink = format!("nats:{}", nats.url);
    let args = ["--nats-stream", "ONCE", "--nats-subject-prefix", "cdc.test"];
    let spawn = |extra: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(extra);
        Running(cdc.command_into(&sink, &all).spawn().unwrap())
    };
    let mut running = spawn(&["--create-slot"]);
    wait_streaming(&db, "nats_once", &mut running);
    // The workload from another thread while the consumer is killed and restarted.
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || db.run(&workload(3000)).unwrap())
    };
    for kill in 0..5 {
        std::thread::sleep(Duration::from_millis(300 + 170 * kill));
        let _ = running.0.kill();
        let _ = running.0.wait();
        wait_free(&db, "nats_once");
        running = spawn(&[]);
        wait_streaming(&db, "nats_once", &mut running);
    }
    writer.join().unwrap();
    let audit: Vec<(String, String, String, String)> = db
        .run(
            "SELECT xid, op, coalesce(encode(old_id, 'hex'), ''), coalesce(encode(new_id, 'hex'), '') \
             FROM audit ORDER BY seq;",
        )
        .unwrap()
        .lines()
        .map(|l| {
            let mut p = l.split('|').map(str::to_string);
            let mut next = || p.next().unwrap_or_default();
            (next(), next(), next(), next())
        })
        .collect();
    assert!(audit.len() > 7000, "{} audited changes", audit.len());
    // Waits until the stream holds as many changes as the audit.
    let t = Instant::now();
    let changes = loop {
        let messages = read_stream(&nats.url, "ONCE");
        let changes: Vec<Read> = messages
            .into_iter()
            .filter(|m| !m.subject.starts_with("cdc.test._slot."))
            .collect();
        if changes.len() >= audit.len() {
            break changes;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{} of {} changes in the stream; {}",
            changes.len(),
            audit.len(),
            running.report()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let in_stream: Vec<(String, String, String, String)> = changes
        .iter()
        .map(|m| {
            let s = |k: &str| m.body[k].as_str().unwrap_or("").to_string();
            (m.body["xid"].to_string(), s("op"), s("old_id"), s("new_id"))
        })
        .collect();
    let first_difference = in_stream.iter().zip(&audit).position(|(a, b)| a != b);
    assert_eq!(
        (in_stream.len(), first_difference),
        (audit.len(), None),
        "the stream equals the audit, change for change (first difference at that index)"
    );
    // Subjects and headers: the table's subject; relation, operation, commit LSN, identity,
    // and a message id of slot, commit LSN and sequence.
    for m in &changes {
        assert_eq!(m.subject, "cdc.test.rowid_cdc_nats.public.nk");
        let h = |k: &str| {
            m.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(h("Rowid-Relation"), "public.nk");
        assert_eq!(h("Rowid-Op"), m.body["op"].as_str().unwrap());
        assert_eq!(
            h("Rowid-Commit-Lsn"),
            m.body["commit_lsn"].as_str().unwrap()
        );
        let identity = match m.body["op"].as_str().unwrap() {
            "delete" => &m.body["old_id"],
            _ => &m.body["new_id"],
        };
        assert_eq!(h("Rowid-Identity"), identity.as_str().unwrap());
        assert!(
            h("Nats-Msg-Id").starts_with("nats_once:"),
            "{:?}",
            m.headers
        );
    }
    drop(running);
}

/// A restart that finds its slot's last transaction unfinished, published longer ago than
/// half the stream's de-duplication window, is refused naming the stream (a resend would not
/// be de-duplicated); a stream whose subjects do not hold the prefix's is refused by name.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn what_the_stream_could_not_keep_exactly_is_refused() {
    let nats = NatsServer::start("refusals");
    let db = database("rowid_cdc_nats_refusals", "nats_gap");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE g (id int8 PRIMARY KEY);
         CREATE PUBLICATION nats_gap FOR TABLE g;",
    )
    .unwrap();
    let dir = Dir::new("nats-gap");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "nats_gap",
        publication: "nats_gap",
        dir: &dir,
    };
    let _drop = DropSlot(&db, "nats_gap");
    // A stream of other subjects.
    create_stream(
        &nats.url,
        "OTHER",
        &["elsewhere.>"],
        Duration::from_secs(120),
    );
    let sink = format!("nats:{}", nats.url);
    let out = cdc
        .command_into(&sink, &["--nats-stream", "OTHER", "--create-slot"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("NATS stream OTHER holds subjects") && err.contains("rowid_cdc.>"),
        "{err}"
    );
    // A stream with a 4 s window: a transaction left open 2 s ago is past half of it.
    create_stream(&nats.url, "GAP", &["rowid_cdc.>"], Duration::from_secs(4));
    let args = ["--nats-stream", "GAP"];
    let mut first = args.to_vec();
    first.push("--create-slot");
    let running = Running(cdc.command_into(&sink, &first).spawn().unwrap());
    wait_active(&db, "nats_gap");
    db.run("INSERT INTO g VALUES (1);").unwrap();
    let t = Instant::now();
    while read_stream(&nats.url, "GAP").len() < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "open, change, commit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(running);
    wait_free(&db, "nats_gap");
    // As a kill in the middle of the next transaction would leave it.
    publish(
        &nats.url,
        "rowid_cdc._slot.nats_gap",
        r#"{"marker":"open","commit_lsn":"FF/0","after":null,"changes":0}"#,
    );
    std::thread::sleep(Duration::from_millis(2100));
    let out = cdc.command_into(&sink, &args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("NATS stream GAP: slot \"nats_gap\" left transaction FF/0 unfinished")
            && err.contains("de-duplication window (4 s)"),
        "{err}"
    );
}
