//! `cargo xtask bench` section 8: out-of-cache ordered apply, the design proposal's §13
//! locality claim. Two storage tables hold the same rows of a keyed source (loaded in key
//! order, as a snapshot in key order loads them): one keyed by Row Identity V2 (`bytea`, the
//! registry's direct UNIQUE B-tree; an `int8` key encodes in its order), one by a V1-style
//! identity (the key's text hashed into a BIGINT, `hashtextextended`, a UNIQUE B-tree on it).
//! On a cluster whose `shared_buffers` is several times smaller than either table, restarted
//! before each run (its buffers empty), the same changes in key order update one row each
//! through the identity's index; the tables' block reads (`pg_statio_user_tables`: blocks
//! that were not in shared buffers) are counted per change.

use std::time::Instant;

use crate::pg::{Cluster, Source};
use crate::shell::step;

/// How much work: the storage's rows, the changes (every `rows / changes`-th key, in key
/// order) and the cluster's `shared_buffers`.
pub struct Work {
    /// Rows of each storage table.
    pub rows: u64,
    /// Single-row updates, in key order.
    pub changes: u64,
    /// `shared_buffers` of the cluster, e.g. `16MB`.
    pub shared_buffers: &'static str,
}

/// One identity's run: heap and index blocks read, and seconds.
struct Reads {
    heap: f64,
    index: f64,
    seconds: f64,
}

/// Runs `sql` on the `loc` database of `cluster`; its output, trimmed.
fn on(cluster: &Cluster, sql: &str) -> Result<String, String> {
    cluster
        .psql()
        .with_db("loc")
        .run(sql)
        .map(|s| s.trim().to_string())
}

/// Section 8 into `report`.
pub fn locality(work: &Work, report: &mut String) -> Result<(), String> {
    step("8. out-of-cache ordered apply: V2 bytea identity against a V1-style hashed BIGINT");
    let cluster = crate::pg::cluster(&Source::Debian.bindir()?, "pg-bench-loc", 55_392)?;
    let settings = format!("-c shared_buffers={}", work.shared_buffers);
    cluster.restart(&settings)?;
    cluster
        .psql()
        .run("DROP DATABASE IF EXISTS loc; CREATE DATABASE loc;")?;
    let (n, m) = (work.rows, work.changes);
    let stride = (n / m).max(1);
    // The identities as each storage computes them from the key `$k`.
    let v2 = "pgtrickle.encode_row_id_v2('SCAN_KEY', ROW($k))";
    let v1 = "pg_catalog.hashtextextended(($k)::pg_catalog.text, 0)";
    let table = |name: &str, id_type: &str, id: &str| {
        format!(
            "CREATE TABLE {name} (\"__pgt_row_id\" {id_type} NOT NULL, k int8, v int4, pad text);
             INSERT INTO {name} SELECT {}, k, 0, repeat('x', 40)
               FROM generate_series(1::int8, {n}) AS k ORDER BY k;
             CREATE UNIQUE INDEX ON {name} (\"__pgt_row_id\");",
            id.replace("$k", "k")
        )
    };
    on(
        &cluster,
        &format!(
            "CREATE EXTENSION pg_trickle_ext; {} {} VACUUM ANALYZE; CHECKPOINT;",
            table("v2", "bytea", v2),
            table("v1", "int8", v1)
        ),
    )?;
    let sizes = on(
        &cluster,
        "SELECT pg_size_pretty(pg_relation_size('v2')) || ' + ' || \
         pg_size_pretty(pg_indexes_size('v2')) || ' | ' || \
         pg_size_pretty(pg_relation_size('v1')) || ' + ' || \
         pg_size_pretty(pg_indexes_size('v1'))",
    )?;
    let mut runs = Vec::new();
    for (name, id) in [("v2", v2), ("v1", v1)] {
        // Empty shared buffers: every block a change needs that an earlier change of this
        // run did not bring in is a read.
        cluster.restart(&settings)?;
        let counters = format!(
            "SELECT heap_blks_read || ' ' || idx_blks_read FROM pg_statio_user_tables \
             WHERE relname = '{name}';"
        );
        let before = on(&cluster, &counters)?;
        let started = Instant::now();
        // One statement per change, its identity computed as the storage's writer computes
        // it; then the backend's statistics flushed, then read in the same session.
        let after = on(
            &cluster,
            &format!(
                "DO $$ DECLARE key_ int8; BEGIN
                   FOR i IN 1..{m} LOOP
                     key_ := i * {stride};
                     UPDATE {name} SET v = v + 1 WHERE \"__pgt_row_id\" = {};
                   END LOOP; END $$;
                 SELECT pg_stat_force_next_flush() \\g /dev/null
                 {counters}",
                id.replace("$k", "key_")
            ),
        )?;
        let seconds = started.elapsed().as_secs_f64();
        let updated = on(
            &cluster,
            &format!("SELECT count(*) FROM {name} WHERE v = 1;"),
        )?;
        if updated != m.to_string() {
            return Err(format!("{name}: {updated} rows updated, expected {m}"));
        }
        let parse = |s: &str| -> Result<(f64, f64), String> {
            let mut it = s.split_whitespace().map(str::parse::<f64>);
            match (it.next(), it.next()) {
                (Some(Ok(h)), Some(Ok(i))) => Ok((h, i)),
                _ => Err(format!("unexpected block counters {s:?}")),
            }
        };
        let (h0, i0) = parse(&before)?;
        let (h1, i1) = parse(after.lines().last().unwrap_or_default())?;
        runs.push(Reads {
            heap: (h1 - h0) / m as f64,
            index: (i1 - i0) / m as f64,
            seconds,
        });
    }
    report.push_str(&format!(
        "## 8. Out-of-cache ordered apply: V2 identity against a V1-style hashed BIGINT\n\n\
         Two storage tables of {n} rows (heap + indexes: V2 {v2size}; V1 {v1size}), loaded in \
         key order, on a cluster with `shared_buffers = {sb}` restarted before each run; \
         {m} single-row UPDATEs, every {stride}th key in key order, each matching its row \
         through the identity's UNIQUE B-tree. Block reads are `pg_statio_user_tables` \
         counters (blocks not found in shared buffers), per change.\n\n\
         | identity | heap reads / change | index reads / change | total / change | s |\n\
         |---|---|---|---|---|\n",
        v2size = sizes.split(" | ").next().unwrap_or_default(),
        v1size = sizes.split(" | ").nth(1).unwrap_or_default(),
        sb = work.shared_buffers,
    ));
    for (name, r) in [
        ("V2 `bytea` (direct UNIQUE B-tree)", &runs[0]),
        ("V1-style hashed `int8`", &runs[1]),
    ] {
        report.push_str(&format!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.2} |\n",
            r.heap,
            r.index,
            r.heap + r.index,
            r.seconds
        ));
    }
    let ratio = |a: f64, b: f64| if a > 0.0 { b / a } else { f64::INFINITY };
    report.push_str(&format!(
        "\nV1 / V2 index reads per change: {:.1}x; all reads: {:.1}x (the proposal's §13 \
         claim: V2 keeps the source key's locality, V1's hash scatters it).\n\n",
        ratio(runs[0].index, runs[1].index),
        ratio(runs[0].heap + runs[0].index, runs[1].heap + runs[1].index),
    ));
    cluster.psql().run("DROP DATABASE loc;")?;
    Ok(())
}
