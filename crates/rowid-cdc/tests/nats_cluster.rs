//! The NATS sink into a three-node JetStream cluster on loopback (three `nats-server`
//! processes the test starts), a stream with three replicas: during a workload of over
//! 10^5 changes the consumer is SIGKILLed several times and one node is killed and started
//! again; the stream then holds every change exactly once, in commit order, equal
//! (transaction, operation, identities) to the audit trigger's record (issue 23's proof).
//!
//! Needs a server with `wal_level = logical` and the extension, and `nats-server` on PATH:
//! run through `cargo xtask test` (on one major: it tests the cluster, not the server).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod nats_kit;

use std::time::{Duration, Instant};

use common::{Cdc, Dir, DropSlot, Running, database, wait_free, wait_streaming};
use nats_kit::{
    NatsServer, assert_equals_audit, audit, audited_table, create_stream, free_port, wait_changes,
    workload,
};

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_three_node_cluster_holds_every_change_once_through_kills_and_a_node_restart() {
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<NatsServer> = (0..3)
        .map(|i| {
            let others: Vec<u16> = (0..3).filter(|j| *j != i).map(|j| routes[j]).collect();
            NatsServer::node(&format!("n{i}"), clients[i], routes[i], &others)
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    // Created by the test once the cluster elected its leaders (the sink uses it as it is).
    create_stream(
        &urls[0],
        "CLUSTER",
        &["rowid_cdc.>"],
        Duration::from_secs(120),
        3,
    );

    let db = database("rowid_cdc_nats_cluster", "nats_cluster");
    audited_table(&db, "nats_cluster");
    let dir = Dir::new("nats-cluster");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "nats_cluster",
        publication: "nats_cluster",
        dir: &dir,
    };
    let _drop = DropSlot(&db, "nats_cluster");
    let sink = format!("nats:{}", urls.join(","));
    let spawn = |extra: &[&str]| {
        let mut all = vec!["--nats-stream", "CLUSTER"];
        all.extend_from_slice(extra);
        Running(cdc.command_into(&sink, &all).spawn().unwrap())
    };
    let mut running = spawn(&["--create-slot"]);
    wait_streaming(&db, "nats_cluster", &mut running);
    let started = Instant::now();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || db.run(&workload(40_100)).unwrap())
    };
    // Consumer kills, a node killed after the first and started again after the third.
    for kill in 0..5u64 {
        std::thread::sleep(Duration::from_millis(1500 + 400 * kill));
        if kill == 1 {
            nodes[1].kill();
        }
        if kill == 3 {
            nodes[1].restart();
        }
        let _ = running.0.kill();
        let _ = running.0.wait();
        wait_free(&db, "nats_cluster");
        running = spawn(&[]);
        wait_streaming(&db, "nats_cluster", &mut running);
    }
    writer.join().unwrap();
    let audit = audit(&db);
    assert!(audit.len() >= 100_000, "{} audited changes", audit.len());
    // Read back through the node that was restarted.
    let changes = wait_changes(
        &urls[1],
        "CLUSTER",
        "rowid_cdc",
        &audit,
        Duration::from_secs(300),
        &mut running,
    );
    assert_equals_audit(&changes, &audit);
    eprintln!(
        "nats cluster: {} changes, 5 consumer kills and a node restart, in {:.1} s",
        audit.len(),
        started.elapsed().as_secs_f64()
    );
    drop(running);
}
