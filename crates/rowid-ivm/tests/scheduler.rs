//! The scheduler on a server (spec/stream-tables.md §8), on a cluster of its own started with
//! `shared_preload_libraries = pg_trickle_ext`: a graph of three levels (a filter every
//! second over an aggregate over a join, both `calculated`) and a FULL table kept by the
//! scheduler alone through a seeded workload, every level equal to its query and to the
//! identities derived by hand from the sources, a write reflected at the third level within
//! two schedules; a failing stream table backing off while the others go on; the scheduler
//! in `pg_stat_activity`; `pg_trickle.enabled`; `rebuild_stream_tables` while the scheduler
//! waits for what it replaces (no failure recorded, schedules carried, exact afterwards);
//! and a scheduler SIGKILLed while it refreshes
//! (PostgreSQL then crash-restarts, as for any backend killed): exact afterwards, no refresh
//! applied twice.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use rowid_testkit::psql::Psql;
use rowid_testkit::session::Session;

/// (stream table, its query, schedule, mode, its columns, its rows derived by hand from the
/// sources: the identity per spec §3 and §7, then the columns).
const LEVELS: &[(&str, &str, &str, &str, &str, &str)] = &[
    (
        "s_join",
        "SELECT o.id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.cust",
        "calculated",
        "DIFFERENTIAL",
        "id, region, amount",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(o.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(c.id))::pgtrickle.row_id)),
                o.id, c.region, o.amount
         FROM orders o JOIN customers c ON c.id = o.cust",
    ),
    (
        "s_agg",
        "SELECT region, count(*) AS n, sum(amount) AS total FROM s_join GROUP BY region",
        "calculated",
        "DIFFERENTIAL",
        "region, n, total",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(c.region)), c.region, count(*),
                sum(o.amount)
         FROM orders o JOIN customers c ON c.id = o.cust GROUP BY c.region",
    ),
    (
        "s_top",
        "SELECT region, total FROM s_agg WHERE n > 2",
        "1s",
        "DIFFERENTIAL",
        "region, total",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(c.region)), c.region, sum(o.amount)
         FROM orders o JOIN customers c ON c.id = o.cust GROUP BY c.region HAVING count(*) > 2",
    ),
    (
        "s_full",
        "SELECT cust, count(*) AS n FROM orders GROUP BY cust",
        "2s",
        "FULL",
        "cust, n",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(cust)), cust, count(*)
         FROM orders GROUP BY cust",
    ),
];

/// The schedule of the third level, in milliseconds.
const TOP_SCHEDULE_MS: u128 = 1_000;

/// How many rows of `level` differ from the rows derived by hand.
fn differs(db: &Psql, level: usize) -> i64 {
    let (name, _, _, _, columns, expected) = LEVELS[level];
    db.multiset_difference(
        &format!("SELECT __pgt_row_id, {columns} FROM {name}"),
        expected,
    )
}

/// Waits until the levels `levels` equal the rows derived by hand; returns how long it took.
fn reached(db: &Psql, levels: std::ops::Range<usize>, when: &str) -> Duration {
    let started = Instant::now();
    while levels.clone().any(|l| differs(db, l) != 0) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{when}: the levels never equal their queries"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// Waits until every level equals the rows derived by hand.
fn settled(db: &Psql, when: &str) {
    reached(db, 0..LEVELS.len(), when);
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    /// One transaction of the workload.
    fn transaction(&mut self) -> String {
        let (id, cust) = (self.below(40), self.below(6));
        let amount = format!("{}.{}", self.below(50), self.below(100));
        let region = ["'north'", "'south'", "'west'", "NULL"][self.below(4) as usize];
        match self.below(6) {
            0 | 1 => format!(
                "INSERT INTO orders VALUES ({id}, {cust}, {amount}) \
                 ON CONFLICT (id) DO UPDATE SET amount = excluded.amount"
            ),
            2 => format!("DELETE FROM orders WHERE id % 7 = {}", id % 7),
            3 => format!("UPDATE orders SET cust = {cust} WHERE id % 5 = {}", id % 5),
            4 => format!("UPDATE customers SET region = {region} WHERE id = {cust}"),
            _ => format!(
                "BEGIN; INSERT INTO orders VALUES ({}, {cust}, 1) ON CONFLICT DO NOTHING; \
                 UPDATE orders SET id = id + 100 WHERE id = {id} AND id < 100 \
                   AND NOT EXISTS (SELECT FROM orders WHERE id = {id} + 100); COMMIT",
                id + 200
            ),
        }
    }
}

/// `rounds` transactions of the workload, every level equal to its query after each.
fn workload(db: &Psql, rng: &mut Rng, rounds: usize, when: &str) {
    for round in 0..rounds {
        let statement = rng.transaction();
        db.run(&statement).unwrap();
        settled(db, &format!("{when}, round {round} ({statement})"));
    }
}

/// The scheduler's pid, once one other than `not` runs for the database.
fn scheduler_pid(db: &Psql, not: &str) -> String {
    let sql = "SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity \
               WHERE backend_type = 'pg_trickle scheduler' AND datname = current_database()";
    let started = Instant::now();
    loop {
        let pid = db.run(sql).unwrap().trim().to_string();
        if !pid.is_empty() && pid != not {
            assert!(!pid.contains(','), "one scheduler per database: {pid}");
            return pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no scheduler for the database"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn the_scheduler_keeps_a_graph_exact_through_failures_and_a_crash() {
    let bindir = rowid_testkit::cluster::server_bindir();
    let base = std::env::temp_dir().join(format!("rowid-ivm-scheduler-{}", std::process::id()));
    let port = 57_000 + (std::process::id() % 1000) as u16;
    let cluster = rowid_testkit::cluster::Cluster::start(&bindir, &base, port).unwrap();
    cluster
        .restart("-c shared_preload_libraries=pg_trickle_ext")
        .unwrap();
    let db = cluster.psql();
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         CREATE TABLE customers (id int8 PRIMARY KEY, region text);
         CREATE TABLE orders (id int8 PRIMARY KEY, cust int8, amount numeric);
         INSERT INTO customers SELECT g, (ARRAY['north', 'south', 'west'])[g % 3 + 1]
           FROM generate_series(0, 5) g;
         INSERT INTO orders SELECT g, g % 6, g * 1.5 FROM generate_series(1, 30) g;
         CREATE TABLE bad_src (id int8 PRIMARY KEY, v int4);",
    )
    .unwrap();
    for (name, query, schedule, mode, _, _) in LEVELS {
        db.run(&format!(
            "SELECT pgtrickle.create_stream_table('{name}', $q${query}$q$, \
             schedule => '{schedule}', refresh_mode => '{mode}')"
        ))
        .unwrap();
    }
    // A stream table whose refreshes will fail: its query names a column dropped below.
    db.run(
        "SELECT pgtrickle.create_stream_table('s_bad', 'SELECT id, v FROM bad_src',
           schedule => '1s');
         ALTER TABLE bad_src DROP COLUMN v;",
    )
    .unwrap();
    let broken_at = Instant::now();
    // The scheduler runs, visible as such.
    scheduler_pid(&db, "");
    settled(&db, "after create");

    // A seeded workload: after each transaction, the third level reflects it within two of
    // its schedules, and every level equals its query.
    let mut rng = Rng(0x5EED_0035);
    let mut slowest = Duration::ZERO;
    for round in 0..25 {
        let statement = rng.transaction();
        db.run(&statement).unwrap();
        let when = format!("round {round} ({statement})");
        // The third level (and the two it reads); then the FULL table, every two seconds.
        slowest = slowest.max(reached(&db, 0..3, &when));
        settled(&db, &when);
    }
    println!(
        "scheduler: slowest write-to-third-level {} ms (schedule {TOP_SCHEDULE_MS} ms)",
        slowest.as_millis()
    );
    assert!(
        slowest.as_millis() <= 2 * TOP_SCHEDULE_MS,
        "a write took {} ms to reach the third level",
        slowest.as_millis()
    );
    // Every scheduled refresh recorded; the third level's among them.
    let recorded: i64 = db
        .run(
            "SELECT count(*) FROM pgtrickle.pgt_refresh_history
             WHERE pgt_relid = 's_top'::regclass AND error IS NULL AND duration_ms > 0",
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(recorded >= 5, "{recorded} refreshes of s_top recorded");

    // The failing table failed, was recorded and backed off (1, 2, 4, 8 s between attempts:
    // at most five attempts in the first 15 s instead of one a second), and held nothing up.
    let elapsed = broken_at.elapsed().as_secs();
    let (failures, error) = {
        let row = db
            .run(
                "SELECT consecutive_failures, last_error FROM pgtrickle.pgt_stream_tables
                 WHERE pgt_relid = 's_bad'::regclass",
            )
            .unwrap();
        let (n, e) = row.trim().split_once('|').unwrap();
        (n.parse::<u64>().unwrap(), e.to_string())
    };
    assert!(failures >= 1, "s_bad never failed");
    assert!(
        error.contains("\"v\""),
        "the error names the column: {error}"
    );
    let allowed = match elapsed {
        0..=2 => 2,
        3..=6 => 3,
        7..=14 => 4,
        15..=30 => 5,
        _ => 6 + elapsed / 600,
    };
    assert!(
        failures <= allowed,
        "{failures} failures in {elapsed} s: no back-off"
    );
    let failed_rows: i64 = db
        .run("SELECT count(*) FROM pgtrickle.pgt_refresh_history WHERE error IS NOT NULL")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(failed_rows as u64, failures, "one history row per failure");

    // pg_trickle.enabled = off: nothing is refreshed; on again, everything catches up.
    db.run("ALTER SYSTEM SET pg_trickle.enabled = off; SELECT pg_reload_conf();")
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    db.run("INSERT INTO orders VALUES (999, 1, 99)").unwrap();
    std::thread::sleep(Duration::from_millis(3 * TOP_SCHEDULE_MS as u64));
    assert!(differs(&db, 0) > 0, "refreshed while disabled");
    db.run("ALTER SYSTEM RESET pg_trickle.enabled; SELECT pg_reload_conf();")
        .unwrap();
    settled(&db, "enabled again");

    // Rebuilt while the scheduler runs (the failing table dropped first: its query no longer
    // reads, so the preflight would refuse the rebuild): every schedule carried, no failure
    // recorded for a table replaced while a refresh waited for it, and the graph is kept
    // exact by the scheduler afterwards.
    db.run("SELECT pgtrickle.drop_stream_table('s_bad')")
        .unwrap();
    db.run("INSERT INTO orders VALUES (996, 4, 7.25)").unwrap();
    // The rebuild held halfway (a session holds a history row it moves) until the scheduler
    // waits for it: its refresh then finds the stream table replaced, which is no failure.
    let mut holder = Session::open(&db, "history-holder");
    holder.run(
        &db,
        "BEGIN; SELECT * FROM pgtrickle.pgt_refresh_history
                WHERE pgt_relid = 's_agg'::regclass FOR UPDATE;",
    );
    let mut rebuilder = Session::open(&db, "rebuilder");
    rebuilder.send(
        "CREATE TABLE rebuild_report AS SELECT name, action, step
         FROM pgtrickle.rebuild_stream_tables();",
    );
    rebuilder.wait(&db, "Lock");
    db.wait_for(
        "SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'pg_trickle scheduler' AND wait_event_type = 'Lock'",
        "1",
        "the scheduler waiting for the rebuild",
    );
    holder.finish();
    rebuilder.finish();
    let rebuilt = db
        .run("SELECT string_agg(name || ' ' || action, ', ' ORDER BY step) FROM rebuild_report")
        .unwrap();
    assert_eq!(
        rebuilt.matches(" rebuilt").count(),
        LEVELS.len(),
        "{rebuilt}"
    );
    assert_eq!(
        db.run(
            "SELECT string_agg(pgt_name || '=' || schedule, ' ' ORDER BY pgt_name)
             FROM pgtrickle.pgt_stream_tables"
        )
        .unwrap()
        .trim(),
        "\"public\".\"s_agg\"=calculated \"public\".\"s_full\"=2s \"public\".\"s_join\"=calculated \"public\".\"s_top\"=1s"
    );
    settled(&db, "after the rebuild");
    workload(&db, &mut rng, 3, "after the rebuild");
    assert_eq!(
        db.run(
            "SELECT coalesce(string_agg(pgt_name || ': ' || error, '; '), '')
             FROM pgtrickle.pgt_refresh_history
             WHERE error IS NOT NULL AND pgt_name <> 'public.s_bad'"
        )
        .unwrap()
        .trim(),
        "",
        "a refresh failed around the rebuild"
    );

    // Killed mid-refresh: a session holds a lock the refresh of the second level needs, the
    // scheduler waits for it inside its refresh (the first level's committed, the second's
    // begun), and is SIGKILLed there. PostgreSQL crash-restarts; the launcher starts the
    // scheduler again, and every level is exact: the interrupted refresh rolled back, none
    // applied twice.
    let mut holder = Session::open(&db, "lock-holder");
    holder.run(&db, "BEGIN; LOCK TABLE s_agg IN SHARE MODE;");
    db.run("INSERT INTO orders VALUES (998, 2, 5.5), (997, 3, 1)")
        .unwrap();
    let waiting = "SELECT count(*) FROM pg_stat_activity
                   WHERE backend_type = 'pg_trickle scheduler' AND wait_event_type = 'Lock'
                     AND query = 'pg_trickle: refresh public.s_agg'";
    db.wait_for(
        waiting,
        "1",
        "the scheduler waiting inside the refresh of s_agg",
    );
    let pid = scheduler_pid(&db, "");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(holder);
    // The server is back (crash recovery), with a new scheduler.
    let started = Instant::now();
    while db.run("SELECT 1").is_err() {
        assert!(started.elapsed() < Duration::from_secs(60), "no restart");
        std::thread::sleep(Duration::from_millis(100));
    }
    scheduler_pid(&db, &pid);
    settled(&db, "after the crash");
    workload(&db, &mut rng, 5, "after the crash");
    cluster.remove().unwrap();
}

/// Issue 51 item 5: a fast shutdown stops the launcher and the schedulers at its first
/// SIGTERM. pgrx's `sigterm_received` clears its flag, and the launcher's pause after starting
/// each database's scheduler ignored the answer: a SIGTERM arriving then was lost, the launcher
/// slept on, and `pg_ctl stop -m fast` waited for it until a second SIGTERM (here: until
/// `pg_ctl` gives up after 60 s). Twelve databases keep the launcher in those pauses for about
/// two seconds after a start; the stop comes in the middle of them.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn a_fast_shutdown_stops_the_launcher_at_once() {
    let bindir = rowid_testkit::cluster::server_bindir();
    let base = std::env::temp_dir().join(format!("rowid-ivm-shutdown-{}", std::process::id()));
    let port = 57_000 + ((std::process::id() + 500) % 1000) as u16;
    let cluster = rowid_testkit::cluster::Cluster::start(&bindir, &base, port).unwrap();
    let db = cluster.psql();
    for i in 0..12 {
        db.run(&format!("CREATE DATABASE shutdown_{i};")).unwrap();
    }
    for round in 0..3 {
        cluster
            .restart("-c shared_preload_libraries=pg_trickle_ext")
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let took = cluster
            .stop_fast()
            .unwrap_or_else(|e| panic!("round {round}: the server did not stop: {e}"));
        assert!(
            took < Duration::from_secs(10),
            "round {round}: the fast shutdown took {took:?}"
        );
    }
}
