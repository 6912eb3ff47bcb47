//! Bench 9 (issue 23): one UPDATE of n rows published by `rowid-cdc --sink nats` into a
//! JetStream stream of one replica (one `nats-server`) and of three (a three-node cluster on
//! loopback), against the JSON-lines file sink reading the same transaction in the same run.
//! Each reader has slots of its own made before the UPDATE and reads it twice, in turn with
//! the others; its faster run counts. A run ends once the n changes are durable (for NATS:
//! every publication acknowledged by JetStream, which is when rowid-cdc acknowledges the slot).
//! The ceiling beside them: `async-nats` alone (the `nats_ceiling` example) publishing n
//! messages of the same shape (JSON body, the sink's headers and message ids, the same
//! acknowledgement window) into fresh streams on the same servers, no PostgreSQL: what any
//! client built on it gets from these servers on this machine.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pg::Cluster;
use crate::shell::{root, step, timed};

/// `nats-server` processes, killed when dropped.
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Starts `nats-server` with JetStream on `port` (store under target/bench/nats/`name`), with
/// `extra` arguments; waits until it listens.
fn server(name: &str, port: u16, extra: &[String]) -> Result<Child, String> {
    let store = root().join("target").join("bench").join("nats").join(name);
    let _ = std::fs::remove_dir_all(&store);
    let child = Command::new("nats-server")
        .args([
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-n",
            name,
            "-sd",
        ])
        .arg(&store)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nats-server: {e}"))?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!("nats-server {name} did not listen"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child)
}

/// Bench 9 on `cluster` with the rowid-cdc `binary`: `n` rows; the ceiling is built as
/// `build` says, like rowid-cdc.
pub fn nats(
    cluster: &Cluster,
    binary: &std::path::Path,
    n: u64,
    build: crate::bench_cdc::CdcBuild,
    report: &mut String,
) -> Result<(), String> {
    step(&format!(
        "9. NATS JetStream sink (one UPDATE of {n} rows, 1 and 3 replicas)"
    ));
    crate::setup::apt(&["nats-server"])?;
    let single = free_port()?;
    let mut servers = Servers(vec![server("single", single, &[])?]);
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let routes: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    for i in 0..3 {
        let others: Vec<String> = (0..3)
            .filter(|j| *j != i)
            .map(|j| format!("nats://127.0.0.1:{}", routes[j]))
            .collect();
        let extra = vec![
            "--cluster_name".to_string(),
            "bench".into(),
            "--cluster".into(),
            format!("nats://127.0.0.1:{}", routes[i]),
            "--routes".into(),
            others.join(","),
        ];
        servers
            .0
            .push(server(&format!("node{i}"), clients[i], &extra)?);
    }
    let three = clients
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let psql = cluster.psql();
    psql.run("DROP DATABASE IF EXISTS natsbench; CREATE DATABASE natsbench;")?;
    let db = psql.with_db("natsbench");
    db.run(&format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE t (id int8 PRIMARY KEY, v int4);
         INSERT INTO t SELECT g, 0 FROM generate_series(1, {n}) g;
         CREATE PUBLICATION p FOR TABLE t;"
    ))?;
    let dir = root()
        .join("target")
        .join("bench")
        .join("nats")
        .join("state");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dsn = cluster.dsn("natsbench");
    let cdc = |slot: &str, sink: &str, extra: &[&str]| {
        crate::bench_cdc::cdc_command(binary, &dsn, &dir, slot, sink, extra)
    };
    // (slot, sink, extra arguments) per reader and run; a run's streams have subjects of their
    // own (two streams of one server cannot share subjects).
    let readers: Vec<(String, String, Vec<String>)> = (1..=2)
        .flat_map(|run| {
            [
                (
                    format!("nb_file{run}"),
                    format!(
                        "jsonl:{}",
                        dir.join(format!("changes{run}.jsonl")).display()
                    ),
                    Vec::new(),
                ),
                (
                    format!("nb_r1_{run}"),
                    format!("nats:nats://127.0.0.1:{single}"),
                    vec![
                        "--nats-stream".into(),
                        format!("R1_{run}"),
                        "--nats-subject-prefix".into(),
                        format!("bench{run}"),
                    ],
                ),
                (
                    format!("nb_r3_{run}"),
                    format!("nats:{three}"),
                    vec![
                        "--nats-stream".into(),
                        format!("R3_{run}"),
                        "--nats-replicas".into(),
                        "3".into(),
                        "--nats-subject-prefix".into(),
                        format!("bench{run}"),
                    ],
                ),
            ]
        })
        .collect();
    for (slot, sink, extra) in &readers {
        let mut args: Vec<&str> = extra.iter().map(String::as_str).collect();
        args.extend(["--create-slot", "--stop-after", "0"]);
        timed(&mut cdc(slot, sink, &args))?;
    }
    db.run("UPDATE t SET v = v + 1;")?;
    let stop = n.to_string();
    let mut best: [Option<(f64, String)>; 3] = [None, None, None];
    for (i, (slot, sink, extra)) in readers.iter().enumerate() {
        let mut args: Vec<&str> = extra.iter().map(String::as_str).collect();
        args.extend(["--stop-after", &stop, "--progress"]);
        let run = timed(&mut cdc(slot, sink, &args))?;
        let kind = &mut best[i % 3];
        if kind.as_ref().is_none_or(|(b, _)| run.0 < *b) {
            *kind = Some(run);
        }
    }
    db.run(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE database = 'natsbench';",
    )?;
    // The ceiling, also twice each, its faster run.
    let ceiling = crate::bench_cdc::rowid_cdc_build(Some("nats_ceiling"), build)?;
    let mut ceilings = [f64::MAX, f64::MAX];
    for run in 1..=2 {
        for (i, (urls, replicas)) in [
            (format!("nats://127.0.0.1:{single}"), 1),
            (three.clone(), 3),
        ]
        .iter()
        .enumerate()
        {
            let stream = format!("CEIL{replicas}_{run}");
            let subject = format!("ceiling{run}.x");
            let (s, _) = timed(Command::new(&ceiling).args([
                urls.as_str(),
                &stream,
                &subject,
                &replicas.to_string(),
                &n.to_string(),
                "4096",
            ]))?;
            ceilings[i] = ceilings[i].min(s);
        }
    }
    drop(servers);
    let [c1, c3] = ceilings;
    let [
        Some((file_s, file_err)),
        Some((r1, r1_err)),
        Some((r3, r3_err)),
    ] = best
    else {
        return Err("a reader did not run".into());
    };
    let rss = crate::bench_cdc::rss;
    report.push_str(&format!(
        "## 9. NATS JetStream sink (one UPDATE of {n} rows, one transaction)\n\n\
         Each reader has two slots of its own made before the UPDATE and reads the \
         transaction twice, in turn with the others; its faster run counts (connecting \
         included). A NATS run ends when every change is acknowledged by JetStream. Streams: \
         file storage, one replica on a single nats-server, three replicas on a three-node \
         cluster on loopback (the same machine).\n\n\
         | reader | seconds | changes/s | / JSON lines | peak RSS MB |\n|---|---|---|---|---|\n\
         | rowid-cdc, JSON lines file (fsync per commit) | {file_s:.2} | {:.0} | 1.00 | {} |\n\
         | rowid-cdc, NATS, 1 replica | {r1:.2} | {:.0} | {:.2} | {} |\n\
         | rowid-cdc, NATS, 3 replicas | {r3:.2} | {:.0} | {:.2} | {} |\n\
         | async-nats alone (the ceiling), 1 replica | {c1:.2} | {:.0} | {:.2} | - |\n\
         | async-nats alone (the ceiling), 3 replicas | {c3:.2} | {:.0} | {:.2} | - |\n\n\
         rowid-cdc / ceiling: {:.2} with 1 replica, {:.2} with 3. Target: 3 replicas / JSON \
         lines >= 0.5 (seconds of the file sink / seconds of NATS); peak RSS flat.\n\n",
        n as f64 / file_s,
        rss(&file_err),
        n as f64 / r1,
        file_s / r1,
        rss(&r1_err),
        n as f64 / r3,
        file_s / r3,
        rss(&r3_err),
        n as f64 / c1,
        file_s / c1,
        n as f64 / c3,
        file_s / c3,
        c1 / r1,
        c3 / r3,
    ));
    Ok(())
}
