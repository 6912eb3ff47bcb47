//! `cargo xtask bench` section 7: `rowid-cdc --sink replica:` against PostgreSQL's own
//! logical replication (`CREATE SUBSCRIPTION`, binary) on a second cluster, the same
//! publication and workload, each timed from the moment it starts reading until its copy
//! holds the source's rows: a keyed table's one large UPDATE, and single-row UPDATEs and
//! DELETEs of a keyless REPLICA IDENTITY FULL table (where the subscriber scans for each
//! change, and the replica's probe index does not).
//!
//! Both copies live in the second cluster (the subscriber's tables in one database, the
//! replica's storage in another), so both apply on the same server; the source cluster
//! serves both slots.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::pg::{Cluster, Source};
use crate::shell::{root, step, timed};

/// How much work: rows of the keyed table, rows of the keyless one, single-row changes.
pub struct Work {
    /// Rows of the keyed table (one UPDATE of all of them).
    pub keyed_rows: u64,
    /// Rows of the keyless table.
    pub keyless_rows: u64,
    /// Single-row transactions on the keyless table.
    pub keyless_changes: u64,
}

/// Runs `sql` on database `db` of `cluster` and returns its output (unaligned).
fn on(cluster: &Cluster, db: &str, sql: &str) -> Result<String, String> {
    cluster
        .psql()
        .with_db(db)
        .run(sql)
        .map(|s| s.trim().to_string())
}

/// Waits until `sql` on `db` prints `want`; the seconds since `from`.
fn caught_up(
    cluster: &Cluster,
    db: &str,
    sql: &str,
    want: &str,
    from: Instant,
) -> Result<f64, String> {
    loop {
        if on(cluster, db, sql)? == want {
            return Ok(from.elapsed().as_secs_f64());
        }
        if from.elapsed() > Duration::from_secs(1800) {
            return Err(format!("{sql} on {db} never printed {want}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Section 7 into `report`: `source` serves the publications; a second cluster holds the
/// subscriber's tables and the replica; `rowid_cdc` is the command's binary.
pub fn replica(
    source: &Cluster,
    rowid_cdc: &Path,
    work: &Work,
    report: &mut String,
) -> Result<(), String> {
    step("7. replica apply against CREATE SUBSCRIPTION (a second cluster)");
    let target = crate::pg::cluster(&Source::Debian.bindir()?, "pg-bench-sub", 55_391)?;
    let dir = root().join("target").join("bench").join("replica");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (n, kn, m) = (work.keyed_rows, work.keyless_rows, work.keyless_changes);
    // Slots an interrupted run left behind would keep the database from being dropped.
    source.psql().run(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE database = 'repbench' AND NOT active; \
         DROP DATABASE IF EXISTS repbench WITH (FORCE); CREATE DATABASE repbench;",
    )?;
    on(
        source,
        "repbench",
        &format!(
            "CREATE EXTENSION pg_trickle_ext;
             SELECT pgtrickle.enable_identity_messages();
             CREATE TABLE t (id int8 PRIMARY KEY, v int4);
             INSERT INTO t SELECT g, 0 FROM generate_series(1, {n}) g;
             CREATE TABLE kl (a int4, b int4, c text);
             ALTER TABLE kl REPLICA IDENTITY FULL;
             INSERT INTO kl SELECT g, g, 'row ' || g FROM generate_series(1, {kn}) g;
             CREATE PUBLICATION pk FOR TABLE t;
             CREATE PUBLICATION pl FOR TABLE kl;
             VACUUM ANALYZE t, kl;"
        ),
    )?;
    // The launcher starts an apply worker at most once per wal_retrieve_retry_interval (5 s
    // by default) after the last start: without this the second subscription's time would
    // hold seconds of waiting for its worker.
    target.psql().run(
        "ALTER SYSTEM SET wal_retrieve_retry_interval = '10ms'; SELECT pg_reload_conf(); \
         CREATE DATABASE sub; CREATE DATABASE rep;",
    )?;
    on(&target, "rep", "CREATE EXTENSION pg_trickle_ext;")?;
    // The subscriber starts with the source's rows (copied once, not timed) and its
    // subscriptions disabled, their slots made now: before the workload.
    on(
        &target,
        "sub",
        "CREATE TABLE t (id int8 PRIMARY KEY, v int4); CREATE TABLE kl (a int4, b int4, c text);",
    )?;
    for table in ["t", "kl"] {
        let file = dir.join(format!("{table}.copy"));
        on(
            source,
            "repbench",
            &format!("\\copy {table} TO '{}' (FORMAT binary)", file.display()),
        )?;
        on(
            &target,
            "sub",
            &format!("\\copy {table} FROM '{}' (FORMAT binary)", file.display()),
        )?;
        on(&target, "sub", &format!("VACUUM ANALYZE {table};"))?;
    }
    let conn = source.dsn("repbench");
    // The replica: every row through its initial snapshot (not timed), its slots made now.
    let cdc = |slot: &str, publication: &str, extra: &[&str]| {
        let mut c = std::process::Command::new(rowid_cdc);
        c.args([
            "--dsn",
            &source.dsn("repbench"),
            "--slot",
            slot,
            "--publication",
            publication,
        ])
        .arg("--state")
        .arg(dir.join(format!("{slot}.state")))
        .args(["--sink", &format!("replica:{}", target.dsn("rep"))])
        .args(extra);
        c
    };
    // Each workload's two slots (the subscription's, the replica's) are made just before it:
    // a slot made before the keyed 10^6-row UPDATE decodes all of it whatever its publication
    // carries, which added 3.5 s to both keyless copies on this machine and hid their apply.
    // (The keyed copies still decode the keyless workload's 10^4 small transactions.)
    let keyless_work = format!(
        "DO $$ BEGIN FOR i IN 1..{m} LOOP
           IF i % 2 = 0 THEN UPDATE kl SET b = b + 1 WHERE a = (i * 7919) % {kn} + 1;
           ELSE DELETE FROM kl WHERE a = (i * 104729) % {kn} + 1; END IF;
           COMMIT; END LOOP; END $$;"
    );
    for (sub, slot, publication, rows, work) in [
        (
            "s_keyed",
            "rep_keyed",
            "pk",
            n,
            "UPDATE t SET v = v + 1;".to_string(),
        ),
        ("s_keyless", "rep_keyless", "pl", kn, keyless_work),
    ] {
        on(
            &target,
            "sub",
            &format!(
                "CREATE SUBSCRIPTION {sub} CONNECTION '{conn}' PUBLICATION {publication} \
                 WITH (copy_data = false, enabled = false, binary = true);"
            ),
        )?;
        timed(&mut cdc(
            slot,
            publication,
            &[
                "--create-slot",
                "--snapshot",
                "--stop-after",
                &rows.to_string(),
            ],
        ))?;
        on(source, "repbench", &work)?;
    }
    let keyed_want = on(source, "repbench", "SELECT sum(v) FROM t;")?;
    let keyless_want = on(
        source,
        "repbench",
        "SELECT count(*) || '/' || sum(b) FROM kl;",
    )?;
    let keyless_changes = on(
        source,
        "repbench",
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('rep_keyless', NULL, NULL, \
         'proto_version', '1', 'publication_names', 'pl') WHERE get_byte(data, 0) IN (85, 68);",
    )?;
    let mut rows = Vec::new();
    for (what, sub, slot, publication, check, want, changes) in [
        (
            format!("keyed table, one UPDATE of {n} rows"),
            "s_keyed",
            "rep_keyed",
            "pk",
            "SELECT sum(v) FROM t",
            &keyed_want,
            n.to_string(),
        ),
        (
            format!("keyless FULL table of {kn} rows, {m} single-row UPDATEs and DELETEs"),
            "s_keyless",
            "rep_keyless",
            "pl",
            "SELECT count(*) || '/' || sum(b) FROM kl",
            &keyless_want,
            keyless_changes.clone(),
        ),
    ] {
        let started = Instant::now();
        on(&target, "sub", &format!("ALTER SUBSCRIPTION {sub} ENABLE;"))?;
        let subscription = caught_up(&target, "sub", check, want, started)?;
        on(
            &target,
            "sub",
            &format!("ALTER SUBSCRIPTION {sub} DISABLE;"),
        )?;
        let (replica, _) = timed(&mut cdc(slot, publication, &["--stop-after", &changes]))?;
        let equal = on(&target, "rep", &format!("{check} ;"))? == **want;
        if !equal {
            return Err(format!(
                "{what}: the replica does not hold the source's rows"
            ));
        }
        rows.push((what, subscription, replica));
    }
    report.push_str(
        "## 7. Replica apply against CREATE SUBSCRIPTION\n\n\
         A second PostgreSQL 15 cluster holds both copies: the subscriber's tables (binary \
         subscription, its slot made before the workload, its tables loaded with the source's \
         rows beforehand) and the replica's storage (`rowid-cdc --sink replica:`, loaded by its \
         initial snapshot). Each reads the same WAL from its own slot, both slots of a workload \
         made just before it (the keyless ones after the keyed UPDATE); the time runs from \
         enabling the subscription, or starting rowid-cdc, until the copy holds the source's \
         rows (the subscriber polled every 20 ms; `wal_retrieve_retry_interval` 10 ms, so its apply worker starts at once).\n\n\
         | workload | subscription s | replica s | replica / subscription (throughput) |\n\
         |---|---|---|---|\n",
    );
    for (what, subscription, replica) in &rows {
        report.push_str(&format!(
            "| {what} | {subscription:.2} | {replica:.2} | {:.2} |\n",
            subscription / replica
        ));
    }
    report.push_str(
        "\nTargets (issue 22): keyed >= 1.0; keyless >= 10 (the subscriber scans the table \
         for each change).\n\n",
    );
    for sub in ["s_keyed", "s_keyless"] {
        on(
            &target,
            "sub",
            &format!("ALTER SUBSCRIPTION {sub} SET (slot_name = NONE); DROP SUBSCRIPTION {sub};"),
        )?;
    }
    on(
        source,
        "repbench",
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE database = 'repbench';",
    )?;
    Ok(())
}
