//! `--metrics` against a live server: a consumer serving its counters is scraped over HTTP
//! while a known workload runs (a table read in chunks while streaming, inserts, updates,
//! deletes, changes without identity, a TRUNCATE, and the replication connection terminated
//! once under it); the counters equal what the workload wrote and what the sink holds.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cdc, Dir, DropSlot, Running, database, one, wait_active};

/// The consumer's stderr, line by line, as it prints them.
#[derive(Clone, Default)]
struct Stderr(Arc<Mutex<Vec<String>>>);

impl Stderr {
    /// Follows `running`'s stderr on a thread of its own.
    fn follow(running: &mut Running) -> Stderr {
        let lines = Stderr::default();
        let pipe = running.0.stderr.take().unwrap();
        let into = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                into.0.lock().unwrap().push(line);
            }
        });
        lines
    }

    fn text(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }

    /// The address the consumer said its metrics are at.
    fn metrics_addr(&self) -> String {
        let t = Instant::now();
        loop {
            let found = self.0.lock().unwrap().iter().find_map(|l| {
                l.strip_prefix("rowid-cdc: metrics at http://")
                    .and_then(|rest| rest.strip_suffix("/metrics"))
                    .map(str::to_string)
            });
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no metrics address on stderr: {}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `GET path` over HTTP/1.0: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.lines().next().unwrap().to_string();
    assert!(
        status.ends_with(" 200 OK") == (path == "/metrics"),
        "{path}: {head}"
    );
    if path == "/metrics" {
        assert!(
            head.lines().any(|h| h
                .to_ascii_lowercase()
                .starts_with("content-type: text/plain; version=0.0.4")),
            "the Prometheus text format's content type: {head}"
        );
    }
    (status, body.to_string())
}

/// The samples of one scrape: `name{labels}` (as written) to value.
fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let (_, body) = get(addr, "/metrics");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// Scrapes until `done` holds for the samples (60 s at most); the samples.
fn scrape_until(
    addr: &str,
    stderr: &Stderr,
    what: &str,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let t = Instant::now();
    loop {
        let samples = scrape(addr);
        if done(&samples) {
            return samples;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{what}: never; last scrape {samples:?}; stderr: {}",
            stderr.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn changes(relation: &str, op: &str) -> String {
    format!("rowid_cdc_changes_total{{relation=\"{relation}\",op=\"{op}\"}}")
}

fn sample(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// The workload's counts, the sink's lines and the scraped counters agree: per relation and
/// operation, transactions, snapshot rows and tables, the reconnection, the positions.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn the_metrics_count_what_the_workload_wrote() {
    let db = database("rowid_cdc_metrics", "metrics");
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE t (id int8 PRIMARY KEY, v int4);
         INSERT INTO t SELECT g, 0 FROM generate_series(1, 40) g;
         CREATE TABLE cash (m money);
         CREATE PUBLICATION metrics FOR TABLE t, cash;",
    )
    .unwrap();
    let dir = Dir::new("metrics");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "metrics",
        publication: "metrics",
        dir: &dir,
    };
    let _drop = DropSlot(&db, "metrics");
    let mut running = cdc.spawn(&[
        "--create-slot",
        "--snapshot-table",
        "public.t",
        "--snapshot-chunk",
        "7",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let stderr = Stderr::follow(&mut running);
    let addr = stderr.metrics_addr();
    let (status, _) = get(&addr, "/");
    assert!(status.contains(" 404 "), "{status}");
    wait_active(&db, "metrics");
    // The 40 rows in 6 chunks of at most 7, before any change of the workload.
    let samples = scrape_until(&addr, &stderr, "the snapshot done", |s| {
        sample(s, "rowid_cdc_snapshot_tables_done") == 1.0
    });
    assert_eq!(sample(&samples, "rowid_cdc_snapshot_tables"), 1.0);
    assert_eq!(sample(&samples, "rowid_cdc_snapshot_rows_total"), 40.0);
    assert_eq!(sample(&samples, &changes("public.t", "snapshot")), 40.0);
    assert_eq!(sample(&samples, &changes("public.t", "truncate")), 1.0);
    assert_eq!(sample(&samples, "rowid_cdc_transactions_total"), 0.0);

    // Five transactions of ten inserts, one of 20 updates, one of 5 deletes.
    for i in 0..5 {
        db.run(&format!(
            "INSERT INTO t SELECT g, 1 FROM generate_series({}, {}) g;",
            1001 + i * 10,
            1010 + i * 10
        ))
        .unwrap();
    }
    db.run("UPDATE t SET v = v + 1 WHERE id <= 20;").unwrap();
    db.run("DELETE FROM t WHERE id > 35 AND id <= 40;").unwrap();
    scrape_until(&addr, &stderr, "7 transactions", |s| {
        sample(s, "rowid_cdc_transactions_total") == 7.0
    });
    // The replication connection ends under the consumer; it starts again by itself.
    let pid = one(
        &db,
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'metrics';",
    );
    db.run(&format!("SELECT pg_terminate_backend({pid});"))
        .unwrap();
    // Three changes without identity (money has no identity) and a TRUNCATE.
    db.run("INSERT INTO cash VALUES (1), (2), (3);").unwrap();
    db.run("TRUNCATE cash;").unwrap();
    let samples = scrape_until(&addr, &stderr, "9 transactions", |s| {
        sample(s, "rowid_cdc_transactions_total") == 9.0
    });

    // What the workload wrote, and the truncate that opens a table's chunked snapshot (the
    // consumer replaces what it held of the table: an event of the sink, not a transaction).
    let expected = [
        ("public.t", "truncate", 1.0),
        ("public.t", "snapshot", 40.0),
        ("public.t", "insert", 50.0),
        ("public.t", "update", 20.0),
        ("public.t", "delete", 5.0),
        ("public.cash", "unidentified", 3.0),
        ("public.cash", "truncate", 1.0),
    ];
    for (relation, op, n) in expected {
        assert_eq!(
            sample(&samples, &changes(relation, op)),
            n,
            "{relation} {op}: {samples:?}"
        );
    }
    let families = samples
        .keys()
        .filter(|k| k.starts_with("rowid_cdc_changes_total{"))
        .count();
    assert_eq!(families, expected.len(), "{samples:?}");
    // The sink holds what the counters say, no more.
    let mut in_sink: BTreeMap<(String, String), f64> = BTreeMap::new();
    let lines = cdc.lines();
    for l in &lines {
        *in_sink
            .entry((
                l["relation"].as_str().unwrap().to_string(),
                l["op"].as_str().unwrap().to_string(),
            ))
            .or_default() += 1.0;
    }
    let counted: BTreeMap<(String, String), f64> = expected
        .iter()
        .map(|(r, o, n)| ((r.to_string(), o.to_string()), *n))
        .collect();
    assert_eq!(in_sink, counted);
    assert_eq!(
        sample(&samples, "rowid_cdc_unidentified_changes_total"),
        3.0
    );
    assert_eq!(sample(&samples, "rowid_cdc_refused_changes_total"), 0.0);
    assert_eq!(
        sample(&samples, "rowid_cdc_reconnects_total"),
        1.0,
        "{}",
        stderr.text()
    );
    assert!(stderr.text().contains("reconnecting"), "{}", stderr.text());
    // Positions: durable at or after the last transaction's commit, within what the server
    // reported; the lag is their difference.
    let lsn = |text: &str| {
        let (hi, lo) = text.split_once('/').unwrap();
        (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
    };
    let last_commit = lsn(lines.last().unwrap()["commit_lsn"].as_str().unwrap());
    let durable = sample(&samples, "rowid_cdc_durable_lsn") as u64;
    let server_end = sample(&samples, "rowid_cdc_server_wal_end_lsn") as u64;
    assert!(
        last_commit < durable && durable <= server_end,
        "last commit {last_commit}, durable {durable}, server {server_end}"
    );
    assert!(durable <= lsn(&one(&db, "SELECT pg_current_wal_lsn();")));
    assert_eq!(
        sample(&samples, "rowid_cdc_lag_bytes") as u64,
        server_end - durable
    );
    let since = samples["rowid_cdc_seconds_since_last_commit"];
    assert!((0.0..60.0).contains(&since), "{since}");
    drop(running);
}
