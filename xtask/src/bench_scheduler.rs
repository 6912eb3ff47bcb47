//! `cargo xtask bench` section 12: the scheduler (issue 35). The bench cluster restarted with
//! `pg_trickle_ext` in `shared_preload_libraries`; then, in a database of its own:
//!
//! - **overhead**: the CPU the database's scheduler uses (its `/proc/<pid>/stat` user and
//!   system time) over `window_s` seconds, first with no stream table (the baseline: what a
//!   scheduler costs by existing), then with 100 idle ones scheduled `'1s'` (each refreshed
//!   every second over an empty window), given per minute;
//! - **latency**: a graph of three levels (a join and an aggregate `calculated`, a filter
//!   over them `'1s'`) and `samples` writes, each a new customer with an order, at random
//!   moments; from each write's commit to its group appearing at the third level, timed by
//!   the server (`clock_timestamp()` in a loop polling every 5 ms), against the schedule.

use std::fmt::Write as _;
use std::time::Duration;

use crate::pg::Cluster;
use crate::shell::step;

/// The size of the workload.
pub struct Work {
    /// Seconds over which the scheduler's CPU is measured, each way.
    pub window_s: u64,
    /// Writes timed to the third level.
    pub samples: u32,
}

/// Clock ticks a second (`getconf CLK_TCK`; 100 on Linux).
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// User plus system CPU seconds of process `pid` so far.
fn cpu_seconds(pid: &str) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("an unexpected /proc/pid/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    Ok((utime + stime) / ticks_per_second())
}

/// The pid of the scheduler of `db`, once it runs.
fn scheduler(cluster: &Cluster, db: &str) -> Result<String, String> {
    for _ in 0..600 {
        let pid = cluster
            .psql()
            .with_db(db)
            .run(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_trickle scheduler'
                   AND datname = current_database()",
            )?
            .trim()
            .to_string();
        if !pid.is_empty() {
            return Ok(pid);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("no scheduler for {db}"))
}

/// CPU seconds per minute the scheduler `pid` uses over `window_s` seconds.
fn cpu_per_minute(pid: &str, window_s: u64) -> Result<f64, String> {
    let before = cpu_seconds(pid)?;
    std::thread::sleep(Duration::from_secs(window_s));
    let after = cpu_seconds(pid)?;
    Ok((after - before) * 60.0 / window_s as f64)
}

/// Runs the section into `report`.
pub fn scheduler_bench(cluster: &Cluster, work: &Work, report: &mut String) -> Result<(), String> {
    step("scheduler: overhead of 100 idle stream tables, and a write's way to the third level");
    cluster.restart("-c shared_preload_libraries=pg_trickle_ext")?;
    let admin = cluster.psql();
    admin.run("DROP DATABASE IF EXISTS sched; CREATE DATABASE sched")?;
    let db = cluster.psql().with_db("sched");
    // A stream table with a manual schedule starts nothing: the scheduler is asked for by
    // one with a schedule, so the baseline has one that reads an empty catalog.
    db.run(
        "CREATE EXTENSION pg_trickle_ext;
         CREATE TABLE src (id int8 PRIMARY KEY, g int4, v numeric);
         INSERT INTO src SELECT g, g % 100, g FROM generate_series(1, 10000) g;
         CREATE TABLE customers (id int8 PRIMARY KEY, region text);
         CREATE TABLE orders (id int8 PRIMARY KEY, cust int8, amount numeric);
         INSERT INTO customers SELECT g, 'r' || g FROM generate_series(1, 1000) g;
         INSERT INTO orders SELECT g, g % 1000 + 1, g FROM generate_series(1, 10000) g;
         SELECT pgtrickle.create_stream_table('b_seed', 'SELECT id FROM src WHERE id < 0',
           schedule => '1h');",
    )?;
    let pid = scheduler(cluster, "sched")?;
    let baseline = cpu_per_minute(&pid, work.window_s)?;
    let mut create = String::new();
    for i in 0..100 {
        let _ = writeln!(
            create,
            "SELECT pgtrickle.create_stream_table('b_idle_{i}',
               'SELECT g, count(*) AS n, sum(v) AS s FROM src WHERE g % 100 = {i} GROUP BY g',
               schedule => '1s');"
        );
    }
    db.run(&create)?;
    // One round of their first refreshes passes before the window opens.
    std::thread::sleep(Duration::from_secs(2));
    let idle = cpu_per_minute(&pid, work.window_s)?;
    let refreshes: i64 = db
        .run(
            "SELECT count(*) FROM pgtrickle.pgt_refresh_history
             WHERE pgt_name LIKE 'public.b_idle_%' AND error IS NULL",
        )?
        .trim()
        .parse()
        .map_err(|e| format!("a count: {e}"))?;
    db.run(
        "SELECT pgtrickle.drop_stream_table('b_idle_' || i) FROM generate_series(0, 99) i;
         SELECT pgtrickle.create_stream_table('b_join',
           'SELECT o.id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.cust',
           schedule => 'calculated');
         SELECT pgtrickle.create_stream_table('b_agg',
           'SELECT region, count(*) AS n, sum(amount) AS total FROM b_join GROUP BY region',
           schedule => 'calculated');
         SELECT pgtrickle.create_stream_table('b_top',
           'SELECT region, total FROM b_agg WHERE n >= 1', schedule => '1s');
         CREATE TABLE b_latency (ms float8);",
    )?;
    let mut seed: u64 = 0x5EED_0035;
    for k in 0..work.samples {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(seed % 1000));
        let id = 100_000 + k;
        db.run(&format!(
            "INSERT INTO customers VALUES ({id}, 'new{id}');
             INSERT INTO orders VALUES ({id}, {id}, 1);
             DO $$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN
               LOOP
                 EXIT WHEN EXISTS (SELECT FROM b_top WHERE region = 'new{id}');
                 PERFORM pg_sleep(0.005);
               END LOOP;
               INSERT INTO b_latency VALUES
                 (EXTRACT(epoch FROM clock_timestamp() - t0) * 1000);
             END $$;"
        ))?;
    }
    let latency = db.run(
        "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 0) || '|' ||
                round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms)::numeric, 0) || '|' ||
                round(max(ms)::numeric, 0) FROM b_latency",
    )?;
    let parts: Vec<&str> = latency.trim().split('|').collect();
    let [median, p90, max] = parts.as_slice() else {
        return Err(format!("latencies: {latency}"));
    };
    let exact = db.run(
        "SELECT count(*) FROM ((SELECT region, total FROM b_top EXCEPT ALL
           SELECT c.region, sum(o.amount) FROM orders o JOIN customers c ON c.id = o.cust
           GROUP BY c.region) UNION ALL (SELECT c.region, sum(o.amount) FROM orders o
           JOIN customers c ON c.id = o.cust GROUP BY c.region EXCEPT ALL
           SELECT region, total FROM b_top)) d",
    )?;
    if exact.trim() != "0" {
        return Err(format!(
            "b_top differs from its query in {} rows",
            exact.trim()
        ));
    }
    let _ = write!(
        report,
        "## 12. The scheduler (issue 35)\n\n\
         One database's scheduler, its CPU (user + system, /proc) over {w} s each:\n\n\
         | stream tables | scheduler CPU per minute | share of one core |\n|---|---|---|\n\
         | none but one scheduled hourly (baseline) | {b:.3} s | {bp:.2}% |\n\
         | 100 idle, each `'1s'` ({r} refreshes recorded) | {i:.3} s | {ip:.2}% |\n\n\
         100 idle stream tables cost the scheduler {d:.3} s of CPU a minute more than none \
         ({per:.2} ms per idle refresh).\n\n\
         A write (a new customer and its order, {n} samples at random moments) to its group at \
         the third level (a filter `'1s'` over an aggregate over a join, both `calculated`), \
         timed by the server from the commit: median {median} ms, 90th percentile {p90} ms, \
         max {max} ms, against a schedule of 1000 ms. The third level equals its query at the \
         end.\n\n",
        w = work.window_s,
        b = baseline,
        bp = baseline / 60.0 * 100.0,
        i = idle,
        ip = idle / 60.0 * 100.0,
        r = refreshes,
        d = idle - baseline,
        per = if refreshes > 0 {
            (idle - baseline) / 60.0 * 1000.0 / 100.0
        } else {
            0.0
        },
        n = work.samples,
    );
    Ok(())
}
