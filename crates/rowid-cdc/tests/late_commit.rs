//! A consumer SIGKILLed while its last COMMIT runs in a PostgreSQL sink's database: the
//! server finishes a COMMIT whose client is gone, and may do so after the next consumer opened
//! the sink. The next one must not read the position recorded before that transaction and
//! write the transaction again: a replica would meet its own rows ("an identity which the
//! storage table already holds", the replica oracle's failure in CI), a change buffer would
//! hold the transaction's changes twice, silently.
//!
//! The sink's database is a cluster of the test's own, so that its commits can be held: they
//! wait for a synchronous standby that never comes (`synchronous_standby_names`). The
//! consumer's COMMIT of one transaction is held, the consumer killed and started again; every
//! other commit is let through (a cancelled wait commits locally) until the new consumer waits
//! for a lock (the old transaction's rows or position, or the old session itself); only then
//! does the held COMMIT go through. Then one more change, and the sink holds every change once.
//!
//! Needs a server with `wal_level = logical`, the extension, and the server binaries first on
//! `PATH`: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{
    Cdc, Dir, DropSlot, Running, alter_system, database, hold_commits, one, wait_active, wait_for,
};
use rowid_testkit::cluster::Cluster;
use rowid_testkit::psql::Psql;

/// Lets every held commit go when dropped, whatever happened (a held one would keep the
/// cluster from stopping).
struct LetGo<'a>(&'a Psql);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        let _ = alter_system(self.0, "RESET synchronous_standby_names");
    }
}

/// One sink's case.
struct Case {
    name: &'static str,
    /// The sink cluster's port.
    port: u16,
    /// The `--sink` argument for the sink cluster's DSN.
    sink: fn(&str) -> String,
    /// The first run's arguments besides `--create-slot`.
    first: &'static [&'static str],
    /// What the sink holds of table `w` after the first run started: its snapshot's rows.
    before: usize,
    /// Counts, in the sink's database, what the sink holds of table `w` (whose OID is
    /// given): one per row of the snapshot, then one per insert.
    count: fn(u32) -> String,
}

fn late_commit(case: &Case) {
    let Case { name, port, .. } = *case;
    let count = case.count;
    let slot = format!("rowid_late_commit_{name}");
    let src = database(&format!("rowid_cdc_late_commit_{name}"), &slot);
    let _drop = DropSlot(&src, &slot);
    let dir = Dir::new(&format!("late-commit-{name}"));
    let cluster = Cluster::start(
        &rowid_testkit::cluster::server_bindir(),
        &dir.file("sink"),
        port,
    )
    .unwrap();
    let target = cluster.psql();
    let _let_go = LetGo(&target);
    // Only the sink commits there: no autovacuum transaction to be held too.
    alter_system(&target, "SET autovacuum = off").unwrap();
    src.run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE w (id int8 PRIMARY KEY, v int4);
         INSERT INTO w SELECT g, g FROM generate_series(1, 10) g;
         CREATE PUBLICATION p FOR TABLE w;",
    )
    .unwrap();
    let relid: u32 = one(&src, "SELECT 'w'::regclass::oid;").parse().unwrap();
    let cdc = Cdc {
        dsn: src.dsn(),
        slot: &slot,
        publication: "p",
        dir: &dir,
    };
    let sink = (case.sink)(&cluster.dsn("postgres"));
    let spawn = |extra: &[&str]| Running(cdc.command_into(&sink, extra).spawn().unwrap());
    let mut first = vec!["--create-slot"];
    first.extend_from_slice(case.first);
    let mut running = spawn(&first);
    wait_active(&src, &slot);
    src.run("INSERT INTO w VALUES (100, 100);").unwrap();
    wait_for(
        &target,
        &count(relid),
        &(case.before + 1).to_string(),
        &mut running,
        "the first insert never arrived",
    );

    // Commits wait for a synchronous standby that never comes.
    hold_commits(&target);
    src.run("INSERT INTO w VALUES (11, 11);").unwrap();
    let held = "SELECT pid FROM pg_catalog.pg_stat_activity WHERE wait_event = 'SyncRep'";
    wait_for(
        &target,
        &format!("SELECT count(*) FROM ({held}) AS h;"),
        "1",
        &mut running,
        "the sink's commit was never held",
    );
    let old = one(&target, &format!("{held};"));
    drop(running);
    running = spawn(&[]);
    let t = Instant::now();
    loop {
        target
            .run(&format!(
                "SELECT pg_catalog.pg_cancel_backend(pid) FROM pg_catalog.pg_stat_activity \
                 WHERE wait_event = 'SyncRep' AND pid <> {old};"
            ))
            .unwrap();
        let locked = one(
            &target,
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event_type = 'Lock';",
        );
        if locked == "1" {
            break;
        }
        running.still_within(
            t,
            Duration::from_secs(60),
            &format!("{name}: the new consumer never waited for the old session"),
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    alter_system(&target, "RESET synchronous_standby_names").unwrap();

    src.run("INSERT INTO w VALUES (12, 12);").unwrap();
    let t = Instant::now();
    let written = case.before + 3;
    loop {
        let held: usize = one(&target, &count(relid)).parse().unwrap();
        let what = format!("{name}: the sink holds {held} where {written} were written");
        assert!(held <= written, "{what}: {}", running.report());
        if held == written {
            break;
        }
        running.still_within(t, Duration::from_secs(60), &what);
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing more comes.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        one(&target, &count(relid)),
        written.to_string(),
        "{name}: every change once, the late commit's too"
    );
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_replica_does_not_apply_a_late_commit_again() {
    late_commit(&Case {
        name: "replica",
        port: 57_000 + (std::process::id() % 500) as u16,
        sink: |dsn| format!("replica:{dsn}"),
        first: &["--snapshot"],
        before: 10,
        count: |_| "SELECT count(*) FROM public.w;".to_string(),
    });
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn a_change_buffer_does_not_hold_a_late_commit_twice() {
    late_commit(&Case {
        name: "buffer",
        port: 57_500 + (std::process::id() % 500) as u16,
        sink: |dsn| format!("postgres:{dsn}"),
        first: &[],
        before: 0,
        count: |relid| format!("SELECT count(*) FROM pgtrickle_changes.rowid_cdc_{relid};"),
    });
}
