//! `cargo xtask bench` section 8: out-of-cache ordered apply, the design proposal's §13
//! locality claim. Two storage tables hold the same rows of a keyed source (loaded in key
//! order, as a snapshot in key order loads them): one keyed by Row Identity V2 (`bytea`, the
//! registry's direct UNIQUE B-tree; an `int8` key encodes in its order), one by a V1-style
//! identity (the key's text hashed into a BIGINT, `hashtextextended`, a UNIQUE B-tree on it).
//! On a cluster whose `shared_buffers` is several times smaller than either table, restarted
//! before each run (its buffers empty), the same changes in key order update one row each
//! through the identity's index; the tables' block reads (`pg_statio_user_tables`: blocks
//! that were not in shared buffers) are counted per change. The second part (8b) asks the
//! same of a stream table (issue 34): its DIFFERENTIAL refresh applying changes in key order
//! from its change buffer, against a V1-style hashed copy given the same changes.

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
    let (v2size, v1size) = (sizes(&cluster, "v2")?, sizes(&cluster, "v1")?);
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
         counters (blocks not found in shared buffers), per change.\n\n",
        sb = work.shared_buffers,
    ));
    rows(
        report,
        "identity",
        [
            ("V2 `bytea` (direct UNIQUE B-tree)", &runs[0]),
            ("V1-style hashed `int8`", &runs[1]),
        ],
        " (the proposal's §13 claim: V2 keeps the source key's locality, V1's hash scatters it)",
    );
    cluster.psql().run("DROP DATABASE loc;")?;
    stream_table(&cluster, work, &settings, report)
}

/// The report's table of the V2 and the V1-style run (`first`: its first column's name), then
/// their ratios and `remark`.
fn rows(report: &mut String, first: &str, runs: [(&str, &Reads); 2], remark: &str) {
    report.push_str(&format!(
        "| {first} | heap reads / change | index reads / change | total / change | s |\n\
         |---|---|---|---|---|\n"
    ));
    for (name, r) in runs {
        report.push_str(&format!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.2} |\n",
            r.heap,
            r.index,
            r.heap + r.index,
            r.seconds
        ));
    }
    let ([v2, v1], ratio) = (runs.map(|(_, r)| r), |a: f64, b: f64| {
        if a > 0.0 { b / a } else { f64::INFINITY }
    });
    report.push_str(&format!(
        "\nV1 / V2 index reads per change: {:.1}x; all reads: {:.1}x{remark}.\n\n",
        ratio(v2.index, v1.index),
        ratio(v2.heap + v2.index, v1.heap + v1.index),
    ));
}

/// `table`'s heap and index sizes, as `heap + indexes`.
fn sizes(cluster: &crate::pg::Cluster, table: &str) -> Result<String, String> {
    on(
        cluster,
        &format!(
            "SELECT pg_size_pretty(pg_relation_size('{table}')) || ' + ' || \
             pg_size_pretty(pg_indexes_size('{table}'))"
        ),
    )
}

/// Parses `heap idx scans` block and scan counters.
fn counters(s: &str) -> Result<[f64; 3], String> {
    let mut out = [0.0; 3];
    let mut it = s.split_whitespace().map(str::parse::<f64>);
    for slot in &mut out {
        *slot = match it.next() {
            Some(Ok(x)) => x,
            _ => return Err(format!("unexpected block counters {s:?}")),
        };
    }
    Ok(out)
}

/// Section 8, second part: the same question on a stream table (issue 34). A DIFFERENTIAL
/// stream table `SELECT k, v, pad FROM src` (a `SCAN_KEY` identity of the `int8` key, its
/// direct UNIQUE B-tree) and a V1-style copy of it (the key's text hashed into a BIGINT, a
/// UNIQUE B-tree on it), both filled in key order; `changes` rows of the source updated in
/// key order by one statement; then, on the restarted cluster (empty shared buffers), the
/// stream table's refresh applies them from its change buffer, and the V1-style copy takes
/// the same changes through its hashed identity in one UPDATE. The refresh runs as planned
/// by the server; the copy's UPDATE with hash and merge joins off, so that it too matches
/// each change through its identity's index (what is measured) rather than reading its whole
/// table; the run fails unless each index was scanned once per change at least.
/// Only the storage tables' own blocks are counted.
fn stream_table(
    cluster: &crate::pg::Cluster,
    work: &Work,
    settings: &str,
    report: &mut String,
) -> Result<(), String> {
    step(
        "8b. out-of-cache DIFFERENTIAL apply: a stream table against a V1-style hashed BIGINT copy",
    );
    let (n, m) = (work.rows, work.changes);
    let stride = (n / m).max(1);
    cluster
        .psql()
        .run("DROP DATABASE IF EXISTS loc; CREATE DATABASE loc;")?;
    const QUERY: &str = "SELECT k, v, pad FROM public.src";
    on(
        cluster,
        &format!(
            "CREATE EXTENSION pg_trickle_ext;
             CREATE TABLE src (k int8 PRIMARY KEY, v int4 NOT NULL, pad text NOT NULL);
             INSERT INTO src SELECT k, 0, repeat('x', 40)
               FROM generate_series(1::int8, {n}) AS k ORDER BY k;
             SELECT pgtrickle.create_stream_table('st_v2', '{QUERY}',
               refresh_mode => 'DIFFERENTIAL') \\g /dev/null
             CREATE TABLE st_v1 AS
               SELECT pg_catalog.hashtextextended(k::pg_catalog.text, 0) AS \"__pgt_row_id\",
                      k, v, pad
                 FROM src ORDER BY k;
             CREATE UNIQUE INDEX st_v1_row_id ON st_v1 (\"__pgt_row_id\");
             VACUUM ANALYZE;
             UPDATE src SET v = v + 1 WHERE k % {stride} = 0;
             CHECKPOINT;"
        ),
    )?;
    let (v2size, v1size) = (sizes(cluster, "st_v2")?, sizes(cluster, "st_v1")?);
    let apply_v2 = "SELECT pgtrickle.refresh_stream_table('st_v2');".to_string();
    let apply_v1 = format!(
        "SET enable_hashjoin = off; SET enable_mergejoin = off;
         UPDATE st_v1 s SET v = c.v FROM src c
          WHERE c.k % {stride} = 0
            AND s.\"__pgt_row_id\" = pg_catalog.hashtextextended(c.k::pg_catalog.text, 0);"
    );
    let mut runs = Vec::new();
    for (name, apply) in [("st_v2", &apply_v2), ("st_v1", &apply_v1)] {
        cluster.restart(settings)?;
        let read = format!(
            "SELECT t.heap_blks_read || ' ' || t.idx_blks_read || ' ' || \
                    (SELECT sum(idx_scan) FROM pg_stat_user_indexes i WHERE i.relid = t.relid)
               FROM pg_statio_user_tables t WHERE t.relname = '{name}';"
        );
        let before = counters(&on(cluster, &read)?)?;
        let started = Instant::now();
        let after = on(
            cluster,
            &format!(
                "{apply}
                 SELECT pg_stat_force_next_flush() \\g /dev/null
                 {read}"
            ),
        )?;
        let seconds = started.elapsed().as_secs_f64();
        let after = counters(after.lines().last().unwrap_or_default())?;
        if after[2] - before[2] < m as f64 {
            return Err(format!(
                "{name}: its indexes were scanned {} times for {m} changes: the apply did \
                 not match each change through the identity's index",
                after[2] - before[2]
            ));
        }
        runs.push(Reads {
            heap: (after[0] - before[0]) / m as f64,
            index: (after[1] - before[1]) / m as f64,
            seconds,
        });
    }
    let differing = on(
        cluster,
        &format!(
            "SELECT count(*) FROM ((SELECT k, v, pad FROM st_v2 EXCEPT ALL {QUERY})
               UNION ALL ({QUERY} EXCEPT ALL SELECT k, v, pad FROM st_v2)) d;
             SELECT count(*) FROM st_v1 WHERE v = 1;"
        ),
    )?;
    if differing.split_whitespace().collect::<Vec<_>>() != ["0", &m.to_string()] {
        return Err(format!(
            "after the apply: {differing:?} (rows of st_v2 differing from its query; \
             rows of st_v1 updated, expected 0 and {m})"
        ));
    }
    report.push_str(&format!(
        "### 8b. The same on a stream table: a DIFFERENTIAL refresh against a V1-style copy\n\n\
         A stream table `{QUERY}` (DIFFERENTIAL; `SCAN_KEY` identity, direct UNIQUE B-tree; \
         heap + indexes {v2size}) and a copy of it keyed by a V1-style hashed BIGINT \
         ({v1size}), both filled in key order; one UPDATE of {m} source rows (every {stride}th \
         key); on the cluster restarted with `shared_buffers = {sb}`, the refresh applies \
         them from the change buffer, and one UPDATE gives the copy the same changes through \
         its hashed identity. The refresh runs as the server plans it; the copy's UPDATE with \
         hash and merge joins off, so that it too matches each change through its identity's \
         index (both checked by the index scans counted). Blocks of the storage \
         tables only, per change; the stream table checked equal to its query after.\n\n",
        sb = work.shared_buffers,
    ));
    rows(
        report,
        "storage",
        [
            ("stream table, V2 identity", &runs[0]),
            ("V1-style hashed `int8` copy", &runs[1]),
        ],
        "",
    );
    cluster.psql().run("DROP DATABASE loc;")?;
    Ok(())
}
