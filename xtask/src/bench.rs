//! `cargo xtask bench [--quick]`: every performance measurement of the project (the codec,
//! per-row cost in SQL, storage layouts, probe prefixes), each with its baselines in the same
//! run, written to `target/bench/report.md` (benches/RESULTS.md discusses a full run).
//!
//! 1. the codec (criterion, `benches/benches/codec.rs`): V2 encode/decode/probe against the
//!    V1 text+XXH3 scheme, memcomparable and a plain copy;
//! 2. per-row cost inside PostgreSQL (`benches/sql/per_row.sql`);
//! 3. the physical comparison of storage layouts (`benches/sql/physical.sql`), with the
//!    out-of-cache applies on a restarted server whose shared buffers are a quarter of the
//!    smallest index;
//! 4. the probe prefix candidates P = 32, 64, 128, 256 (`benches/sql/probe.sql`);
//! 5. to 10. WAL capture, trigger capture, the replica, locality, NATS and DDL under the
//!    extension's event triggers (`bench_cdc`, `bench_replica`, `bench_locality`,
//!    `bench_nats`, `bench_ddl`);
//! 11. stream tables: DIFFERENTIAL refresh against `REFRESH MATERIALIZED VIEW`, IMMEDIATE
//!     against a hand-written statement trigger (`bench_stream`);
//! 12. the scheduler: its CPU with 100 idle stream tables against none, and a write's way to
//!     the third level of a scheduled graph (`bench_scheduler`);
//! 13. window functions: DIFFERENTIAL refresh after 1% of the rows changed in a share of the
//!     partitions, against `REFRESH MATERIALIZED VIEW` (`bench_window`).
//!
//! `--quick` runs everything at small sizes (criterion in test mode, 10^4 rows) as a CI smoke
//! test: it fails when a benchmark is broken, never because of a ratio.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::bench_cdc::{CdcBuild, cdc_command, rowid_cdc_binary, rss};
use crate::pg::{Cluster, Source};
use crate::setup;
use crate::shell::{cargo, exec, root, step, timed};

/// Criterion functions of every workload group, in report order.
const FUNCTIONS: [&str; 9] = [
    "harness",
    "v2_encode",
    "v2_typed",
    "v2_decode",
    "v2_decode_borrowed",
    "v2_probe",
    "v1_text_xxh3",
    "memcomparable",
    "copy",
];

/// Sizes of one run.
struct Sizes {
    rows: u64,
    rounds: u32,
    /// Which `rowid-cdc` build runs: the tested one in quick mode (nothing is judged).
    cdc: CdcBuild,
}

/// The criterion median of `group/function` in ns.
fn median_ns(group: &str, function: &str) -> Result<f64, String> {
    let path = root()
        .join("target")
        .join("criterion")
        .join(group)
        .join(function)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    json["median"]["point_estimate"]
        .as_f64()
        .ok_or_else(|| format!("{}: no median", path.display()))
}

fn codec(quick: bool, report: &mut String) -> Result<(), String> {
    step("1. codec benchmarks (criterion)");
    let mut c = cargo();
    c.args(["bench", "-p", "rowid-benches", "--bench", "codec", "--"]);
    if quick {
        // Runs every benchmark once: proves they work, measures nothing.
        c.arg("--test");
        exec(&mut c)?;
        report.push_str("## 1. Codec\n\n(quick mode: every benchmark ran once; no timings)\n\n");
        return Ok(());
    }
    exec(&mut c)?;
    let groups = workloads()?;
    report.push_str(
        "## 1. Codec (criterion medians, ns per identity)\n\n\
         `harness`: an empty closure timed the same way (what the loop costs). V2 encode is \
         `encode_identity` over prepared values; V2 typed the typed pushes behind the same \
         per-field dispatch memcomparable's contender does; borrowed decode the `fields` \
         iterator; owned decode `decode` (the tree, allocated and dropped).\n\n\
         | workload | harness | V2 encode | V2 typed | V2 decode owned | V2 decode borrowed | \
         V2 probe | V1 text+xxh3 | memcomparable | copy |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut ratios = String::from(
        "| workload | V1 / V2 | memcomparable / V2 | memcomparable / V2 typed | V2 / copy | \
         V2 typed / copy | owned decode / encode | borrowed decode / encode |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for w in &groups {
        let mut m = BTreeMap::new();
        for f in FUNCTIONS {
            m.insert(f, median_ns(w, f)?);
        }
        let _ = write!(report, "| {w} |");
        for f in &FUNCTIONS {
            let _ = write!(report, " {:.1} |", m[f]);
        }
        report.push('\n');
        let enc = m["v2_encode"];
        let _ = writeln!(
            ratios,
            "| {w} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            m["v1_text_xxh3"] / enc,
            m["memcomparable"] / enc,
            m["memcomparable"] / m["v2_typed"],
            enc / m["copy"],
            m["v2_typed"] / m["copy"],
            m["v2_decode"] / enc,
            m["v2_decode_borrowed"] / enc,
        );
    }
    report.push('\n');
    report.push_str(&ratios);
    report.push('\n');
    Ok(())
}

/// The workload names, in the benches' order, as the bench binary lists them
/// (`group/function: benchmark` lines), so xtask need not link the benches crate.
fn workloads() -> Result<Vec<String>, String> {
    let out = cargo()
        .args([
            "bench",
            "-p",
            "rowid-benches",
            "--bench",
            "codec",
            "--",
            "--list",
        ])
        .output()
        .map_err(|e| format!("cargo bench --list: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo bench --list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut groups: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((group, _)) = line
            .strip_suffix(": benchmark")
            .and_then(|name| name.split_once('/'))
            && !groups.iter().any(|g| g == group)
        {
            groups.push(group.to_string());
        }
    }
    if groups.is_empty() {
        return Err("cargo bench --list named no workloads".into());
    }
    Ok(groups)
}

fn sql_dir() -> PathBuf {
    root().join("benches").join("sql")
}

/// Rows `kind|a|b|...` of a script's output, split.
fn rows<'a>(out: &'a str, kind: &str) -> Vec<Vec<&'a str>> {
    out.lines()
        .filter_map(|l| l.strip_prefix(kind)?.strip_prefix('|'))
        .map(|l| l.split('|').collect())
        .collect()
}

fn per_row(cluster: &Cluster, sizes: &Sizes, report: &mut String) -> Result<(), String> {
    step(&format!(
        "2. per-row cost inside PostgreSQL ({} rows, {} rounds)",
        sizes.rows, sizes.rounds
    ));
    let out = cluster.psql().file(
        &sql_dir().join("per_row.sql"),
        &[
            ("rows", sizes.rows.to_string()),
            ("rounds", sizes.rounds.to_string()),
        ],
    )?;
    let lines = rows(&out, "per_row");
    if lines.is_empty() {
        return Err("per_row.sql produced no results".into());
    }
    let net = |name: &str| -> Option<f64> {
        lines
            .iter()
            .find(|l| l[0] == name)
            .and_then(|l| l[2].parse().ok())
    };
    let int8send = net("int8send(int8)").unwrap_or(f64::NAN);
    let _ = writeln!(
        report,
        "## 2. Per-row cost inside PostgreSQL ({} rows, median of {} alternating rounds)\n\n\
         | case | ns/row | net ns/row (minus scan) | net / int8send |\n|---|---|---|---|",
        sizes.rows, sizes.rounds
    );
    for l in &lines {
        let n: f64 = l[2].parse().unwrap_or(f64::NAN);
        let _ = writeln!(
            report,
            "| {} | {} | {} | {:.2} |",
            l[0],
            l[1],
            l[2],
            n / int8send
        );
    }
    let ratio = |a: &str, b: &str| net(a).zip(net(b)).map(|(x, y)| x / y);
    let _ = writeln!(
        report,
        "\nTargets: SCAN_KEY(int8) / int8send = {:.2} (target <= 1.5); \
         two-column key V2 / V1 = {:.2} (target <= 0.5)\n\n\
         The argument form (`encode_row_id_v2_fields`, no ROW): SCAN_KEY(int8) / int8send = \
         {:.2} (target <= 2.0; the record form {:.2}); two-column key / V1 = {:.2} (target <= \
         0.35; the record form {:.2})\n",
        ratio("v2 SCAN_KEY(int8)", "int8send(int8)").unwrap_or(f64::NAN),
        ratio("v2 SCAN_KEY(int8, int8)", "v1 (int8, int8)").unwrap_or(f64::NAN),
        ratio("v2 fields SCAN_KEY(int8)", "int8send(int8)").unwrap_or(f64::NAN),
        ratio("v2 SCAN_KEY(int8)", "int8send(int8)").unwrap_or(f64::NAN),
        ratio("v2 fields SCAN_KEY(int8, int8)", "v1 (int8, int8)").unwrap_or(f64::NAN),
        ratio("v2 SCAN_KEY(int8, int8)", "v1 (int8, int8)").unwrap_or(f64::NAN),
    );
    Ok(())
}

/// Section 6: trigger capture per row, against pg_trickle's V1 PL/pgSQL capture and against
/// the floor (the same C trigger writing a fixed identity).
fn trigger_capture(cluster: &Cluster, sizes: &Sizes, report: &mut String) -> Result<(), String> {
    let rounds = sizes.rounds.min(3);
    step(&format!(
        "6. trigger capture (UPDATE of {} rows, {rounds} rounds)",
        sizes.rows
    ));
    let out = cluster.psql().file(
        &sql_dir().join("capture.sql"),
        &[
            ("rows", sizes.rows.to_string()),
            ("rounds", rounds.to_string()),
        ],
    )?;
    let lines = rows(&out, "capture");
    if lines.len() != 4 {
        return Err(format!(
            "capture.sql produced {} rows, expected 4",
            lines.len()
        ));
    }
    let net = |i: usize| lines[i][3].parse::<f64>().unwrap_or(f64::NAN);
    let _ = writeln!(
        report,
        "## 6. Trigger capture (one UPDATE of {} rows keyed by int8, median of {rounds} alternating rounds)\n\n\
         | trigger | ms | rows/s | net ns/row (minus the UPDATE without trigger) |\n|---|---|---|---|",
        sizes.rows
    );
    for l in &lines {
        let _ = writeln!(report, "| {} | {} | {} | {} |", l[0], l[1], l[2], l[3]);
    }
    let _ = writeln!(
        report,
        "\nBoth triggers write the change's old and new column values beside its identity \
         (the V2 buffer's typed `new_`/`old_` image columns, spec/change-buffer.md format 3). \
         V2 capture_changes / V1 PL/pgSQL capture, net per row = {:.2} (targets: <= 1.0 with \
         images, issue 21; <= 0.5, issue 13); V2 / the floor (a C trigger inserting the same \
         row with a fixed identity) = {:.2}\n",
        net(2) / net(1),
        net(2) / net(3),
    );
    Ok(())
}

/// Runs a script whose output rows are `kind|...` and renders them under `title` with
/// `header` (a markdown header row).
fn table(
    cluster: &Cluster,
    script: &Path,
    vars: &[(&str, String)],
    kind: &str,
    title: &str,
    header: &str,
    report: &mut String,
) -> Result<(), String> {
    let out = cluster.psql().file(script, vars)?;
    let lines = rows(&out, kind);
    if lines.is_empty() {
        return Err(format!("{} produced no {kind} rows", script.display()));
    }
    let _ = writeln!(report, "{title}\n\n{header}");
    let columns = header.matches('|').count() - 1;
    let _ = writeln!(report, "{}|", "|---".repeat(columns));
    for l in lines {
        let _ = writeln!(report, "| {} |", l.join(" | "));
    }
    report.push('\n');
    Ok(())
}

fn physical(cluster: &Cluster, sizes: &Sizes, report: &mut String) -> Result<(), String> {
    step(&format!("3. physical comparison ({} rows)", sizes.rows));
    let script = sql_dir().join("physical.sql");
    let vars = [("rows", sizes.rows.to_string()), ("phase", "load".into())];
    table(
        cluster,
        &script,
        &vars,
        "physical",
        &format!("## 3. Physical comparison ({} rows)", sizes.rows),
        "| layout | heap MB | index MB | WAL MB initial load | WAL MB 10% update | CDC buffer MB per 10% delta | cached apply ms (ordered 10^4) | cached apply ms (random 10^4) |",
        report,
    )?;
    // Out of cache: shared buffers a quarter of the smallest index (V1's), empty after a
    // restart before every apply.
    let out = cluster.psql().file(
        &script,
        &[("rows", sizes.rows.to_string()), ("phase", "sizes".into())],
    )?;
    let smallest_kb: u64 = rows(&out, "smallest_index_kb")
        .first()
        .and_then(|l| l[0].parse().ok())
        .ok_or("physical.sql: no smallest_index_kb")?;
    let shared_kb = (smallest_kb / 4).max(128);
    let _ = writeln!(
        report,
        "Out of cache: shared_buffers = {shared_kb} kB (smallest index {smallest_kb} kB, so every \
         index is at least 4x larger), server restarted before each apply; EXPLAIN (ANALYZE, \
         BUFFERS) of the apply through the layout's index.\n\n\
         | layout | delta | shared read | shared hit | apply ms |\n|---|---|---|---|---|"
    );
    for layout in [
        "v1_bigint",
        "v2_direct",
        "v2_probe_expr",
        "v2_probe_column",
        "v2_hash",
    ] {
        for delta in ["ordered", "random"] {
            cluster.restart(&format!("-c shared_buffers={shared_kb}kB"))?;
            let out = cluster.psql().file(
                &script,
                &[
                    ("rows", sizes.rows.to_string()),
                    ("phase", "apply".into()),
                    ("layout", layout.into()),
                    ("delta", delta.into()),
                ],
            )?;
            for l in rows(&out, "apply") {
                let _ = writeln!(report, "| {} |", l.join(" | "));
            }
        }
    }
    cluster.restart("")?;
    report.push('\n');
    Ok(())
}

fn probe(cluster: &Cluster, sizes: &Sizes, report: &mut String) -> Result<(), String> {
    let rows_n = (sizes.rows / 10).max(1000);
    step(&format!(
        "4. probe prefix P = 32, 64, 128, 256 ({rows_n} rows per set)"
    ));
    table(
        cluster,
        &sql_dir().join("probe.sql"),
        &[("rows", rows_n.to_string())],
        "probe",
        &format!("## 4. Probe prefix ({rows_n} identities per data set, up to 1000 lookups)"),
        "| data set | P | mean id bytes | index MB | us per lookup (median of 3 runs) | buffers per lookup | candidates per lookup |",
        report,
    )
}

/// Rounds of COPY and `--snapshot` (null sink) in bench 5a, alternating.
const SNAPSHOT_ROUNDS: usize = 5;

/// `rowid-cdc` reading one large UPDATE from a slot, against `pg_recvlogical` reading the same
/// transaction from a pgoutput slot with binary values (what the server can decode: the
/// ceiling), with the null sink, the JSON-lines file sink and the PostgreSQL sink (a change
/// buffer in another database of the same server); peak RSS as the command reports it.
fn wal_capture(cluster: &Cluster, sizes: &Sizes, report: &mut String) -> Result<(), String> {
    let n = sizes.rows;
    step(&format!(
        "5. WAL capture throughput (one UPDATE of {n} rows)"
    ));
    let binary = rowid_cdc_binary(sizes.cdc)?;
    let dir = root().join("target").join("bench").join("cdc");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let psql = cluster.psql();
    psql.run(
        "DROP DATABASE IF EXISTS cdcbench; CREATE DATABASE cdcbench; \
         DROP DATABASE IF EXISTS cdcsink1; CREATE DATABASE cdcsink1; \
         DROP DATABASE IF EXISTS cdcsink2; CREATE DATABASE cdcsink2;",
    )?;
    let args = cluster.psql_args().replace("-d postgres", "-d cdcbench");
    let db = rowid_testkit::psql::Psql::new(cluster.bindir().join("psql"), &args);
    db.run(&format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE t (id int8 PRIMARY KEY, v int4);
         INSERT INTO t SELECT g, 0 FROM generate_series(1, {n}) g;
         CREATE PUBLICATION p FOR TABLE t;
         SELECT pg_create_logical_replication_slot('bench_recv1', 'pgoutput');
         SELECT pg_create_logical_replication_slot('bench_recv2', 'pgoutput');"
    ))?;
    let dsn = cluster.dsn("cdcbench");
    let cdc = |slot: &str, sink: &str, extra: &[&str]| {
        cdc_command(&binary, &dsn, &dir, slot, sink, extra)
    };
    // The initial snapshot of t against binary COPY of the same rows into /dev/null (`order`:
    // in key order, as the snapshot reads them: the server's share of its time).
    let copy = |order: &str| -> Result<f64, String> {
        let started = std::time::Instant::now();
        let status = std::process::Command::new(cluster.bindir().join("psql"))
            .args(args.split_whitespace())
            .args([
                "-X",
                "-q",
                "-c",
                &format!("COPY (SELECT id, v FROM ONLY t{order}) TO STDOUT (FORMAT binary)"),
            ])
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("COPY to /dev/null failed".into());
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let stop_after = n.to_string();
    let snap_file = format!("jsonl:{}", dir.join("snapshot.jsonl").display());
    // One timed rowid-cdc snapshot run (slot, state and output removed after it): --snapshot
    // copies t at the slot's consistent point in key order before the stream starts;
    // --snapshot-table reads it in chunks while streaming. Either run stops once its n rows
    // were delivered (the whole run is timed: slot creation, the copy or the chunks with
    // their watermarks).
    let snapshot_run = |slot: &str, sink: &str, how: &str| -> Result<(f64, String), String> {
        let mut extra = vec!["--create-slot", how];
        if how == "--snapshot-table" {
            extra.push("public.t");
        }
        extra.extend(["--progress", "--stop-after", &stop_after]);
        let (secs, err) = timed(&mut cdc(slot, sink, &extra))?;
        db.run(&format!("SELECT pg_drop_replication_slot('{slot}');"))?;
        let _ = std::fs::remove_file(dir.join(format!("{slot}.state")));
        let _ = std::fs::remove_file(dir.join("snapshot.jsonl"));
        Ok((secs, rss(&err)))
    };
    let fastest = |best: &mut Option<(f64, String)>, run: (f64, String)| {
        if best.as_ref().is_none_or(|(b, _)| run.0 < *b) {
            *best = Some(run);
        }
    };
    // The target's pair alternates with its baseline, five rounds (a round takes about a
    // second; on a shared machine a slow spell then meets both sides), the fastest of each
    // counts. The other readers: the faster of two runs.
    let mut copy_runs = Vec::new();
    let mut ordered_runs = Vec::new();
    let mut snap_null = None;
    for _ in 0..SNAPSHOT_ROUNDS {
        copy_runs.push(copy("")?);
        ordered_runs.push(copy(" ORDER BY id")?);
        fastest(
            &mut snap_null,
            snapshot_run("bench_snap_null", "null", "--snapshot")?,
        );
    }
    let mut snap = vec![snap_null.ok_or("no snapshot run")?];
    for (slot, sink, how) in [
        ("bench_snap_file", snap_file.as_str(), "--snapshot"),
        ("bench_snap_chunks", "null", "--snapshot-table"),
    ] {
        let mut best = None;
        for _ in 0..2 {
            fastest(&mut best, snapshot_run(slot, sink, how)?);
        }
        snap.extend(best);
    }
    let copy_secs = copy_runs.iter().copied().fold(f64::INFINITY, f64::min);
    let ordered_secs = ordered_runs.iter().copied().fold(f64::INFINITY, f64::min);
    let copy_list = copy_runs
        .iter()
        .map(|s| format!("{s:.2}"))
        .collect::<Vec<_>>()
        .join(", ");
    report.push_str(&format!(
        "## 5a. Initial snapshot ({n} rows)\n\n\
         `rowid-cdc --create-slot --snapshot` copies t (int8 key) at the slot's consistent \
         point in key order (binary COPY, identities and images computed per row, a \
         checkpoint a second), `--snapshot-table public.t` reads it in chunks of 4096 rows \
         while the stream runs (a watermark per chunk); against `COPY (SELECT id, v FROM ONLY \
         t) TO STDOUT (FORMAT binary)` by psql into /dev/null. rowid-cdc's time is its \
         whole run (connecting, creating the slot, every row) until the n rows were \
         delivered. COPY, the same COPY in key order (`ORDER BY id`, an index scan: the \
         server's part of the snapshot, for reference) and `--snapshot` into the null sink \
         alternate, {SNAPSHOT_ROUNDS} rounds, the fastest of each counts (COPY: {copy_list} \
         s); the other readers: the faster of two runs.\n\n\
         | reader | seconds | rows/s | / COPY | peak RSS MB |\n|---|---|---|---|---|\n\
         | COPY TO STDOUT (binary) into /dev/null | {copy_secs:.2} | {:.0} | 1.00 | - |\n\
         | the same COPY in key order (ORDER BY id) | {ordered_secs:.2} | {:.0} | {:.2} | - |\n\
         | rowid-cdc --snapshot, null sink | {:.2} | {:.0} | {:.2} | {} |\n\
         | rowid-cdc --snapshot, JSON lines file | {:.2} | {:.0} | {:.2} | {} |\n\
         | rowid-cdc --snapshot-table (chunks while streaming), null sink | {:.2} | {:.0} | {:.2} | {} |\n\n\
         Target: >= 0.7 (COPY seconds / snapshot seconds).\n\n",
        n as f64 / copy_secs,
        n as f64 / ordered_secs,
        copy_secs / ordered_secs,
        snap[0].0,
        n as f64 / snap[0].0,
        copy_secs / snap[0].0,
        snap[0].1,
        snap[1].0,
        n as f64 / snap[1].0,
        copy_secs / snap[1].0,
        snap[1].1,
        snap[2].0,
        n as f64 / snap[2].0,
        copy_secs / snap[2].0,
        snap[2].1,
    ));
    // The consumers' slots exist before the workload; `--stop-after 0` only creates them.
    // Each sink reads the transaction twice (two slots, two outputs), as the baseline does.
    // In run order: null, file, buffer, then again (reader `i` is sink `i % 3`).
    let readers: Vec<(String, String)> = (1..=2)
        .flat_map(|run| {
            [
                (format!("bench_null{run}"), "null".to_string()),
                (
                    format!("bench_file{run}"),
                    format!(
                        "jsonl:{}",
                        dir.join(format!("changes{run}.jsonl")).display()
                    ),
                ),
                (
                    format!("bench_pg{run}"),
                    format!("postgres:{}", cluster.dsn(&format!("cdcsink{run}"))),
                ),
            ]
        })
        .collect();
    for (slot, sink) in &readers {
        timed(&mut cdc(
            slot,
            sink,
            &["--create-slot", "--stop-after", "0"],
        ))?;
    }
    db.run("UPDATE t SET v = v + 1;")?;
    let end = db.run("SELECT pg_current_wal_lsn();")?.trim().to_string();
    let recv = |slot: &str| {
        timed(
            std::process::Command::new(cluster.bindir().join("pg_recvlogical"))
                .args(["-d", &dsn, "--slot", slot, "--start", "--no-loop"])
                .args(["-o", "proto_version=1", "-o", "publication_names=p"])
                .args(["-o", "binary=true", "--endpos", &end, "-f", "/dev/null"]),
        )
        .map(|(secs, _)| secs)
    };
    // The baseline runs first and last (the first reader finds the WAL colder); between
    // them every sink runs twice, in turn. The faster of two runs counts, on both sides.
    let recv_first = recv("bench_recv1")?;
    let stop = n.to_string();
    // Per sink (null, file, buffer): the faster run's seconds and its stderr.
    let mut best: [Option<(f64, String)>; 3] = [None, None, None];
    for (i, (slot, sink)) in readers.iter().enumerate() {
        let run = timed(&mut cdc(slot, sink, &["--stop-after", &stop, "--progress"]))?;
        let kind = &mut best[i % 3];
        if kind.as_ref().is_none_or(|(b, _)| run.0 < *b) {
            *kind = Some(run);
        }
    }
    let recv_last = recv("bench_recv2")?;
    let recv = recv_first.min(recv_last);
    let [
        Some((null, null_err)),
        Some((file_s, file_err)),
        Some((pg_s, pg_err)),
    ] = best
    else {
        return Err("a sink did not run".into());
    };
    for run in 1..=2 {
        let lines = std::fs::read_to_string(dir.join(format!("changes{run}.jsonl")))
            .map_err(|e| e.to_string())?
            .lines()
            .count();
        if lines as u64 != n {
            return Err(format!("the file sink holds {lines} changes, expected {n}"));
        }
        let rows = cluster
            .psql()
            .with_db(&format!("cdcsink{run}"))
            .buffer_rows("pgtrickle_changes", "rowid_cdc", "1")?
            .lines()
            .count();
        if rows as u64 != n {
            return Err(format!("the change buffers hold {rows} rows, expected {n}"));
        }
    }
    // Its eight slots go: the sections after it make slots of their own on this cluster
    // (max_replication_slots is 10), and a slot left behind holds WAL back.
    db.run(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE database = 'cdcbench';",
    )?;
    report.push_str(&format!(
        "## 5. WAL capture throughput (one UPDATE of {n} rows, one transaction)\n\n\
         Each reader has its own slot, created before the UPDATE; times include connecting. \
         `pg_recvlogical` reads the pgoutput stream with binary values into /dev/null (the \
         ceiling: what the server can decode and send); it runs before and after rowid-cdc \
         ({recv_first:.2} s and {recv_last:.2} s) and the faster run is the baseline. Each \
         sink reads the transaction twice (slots and outputs of its own), in turn with the \
         others; its faster run counts.\n\n\
         | reader | seconds | changes/s | / pg_recvlogical | peak RSS MB |\n|---|---|---|---|---|\n\
         | pg_recvlogical (pgoutput, binary) | {recv:.2} | {:.0} | 1.00 | - |\n\
         | rowid-cdc, null sink | {null:.2} | {:.0} | {:.2} | {} |\n\
         | rowid-cdc, JSON lines file (fsync per commit) | {file_s:.2} | {:.0} | {:.2} | {} |\n\
         | rowid-cdc, PostgreSQL change buffer (binary COPY, COMMIT per transaction) | {pg_s:.2} | {:.0} | {:.2} | {} |\n\n\
         Target: rowid-cdc / pg_recvlogical >= 0.8 (throughput ratio = pg_recvlogical seconds / \
         rowid-cdc seconds); peak RSS under 100 MB for the one large transaction. The change \
         buffer is in another database of the same server, so its inserts compete with the \
         decoding for the same 2 cores; its RSS is rowid-cdc's own.\n\n",
        n as f64 / recv,
        n as f64 / null,
        recv / null,
        rss(&null_err),
        n as f64 / file_s,
        recv / file_s,
        rss(&file_err),
        n as f64 / pg_s,
        recv / pg_s,
        rss(&pg_err),
    ));
    Ok(())
}

/// Runs the benchmarks (`only`: one part, `codec`, `sql` or `wal`).
pub fn run(quick: bool, only: Option<&str>) -> Result<(), String> {
    const PARTS: [&str; 14] = [
        "codec",
        "sql",
        "per-row",
        "physical",
        "probe",
        "wal",
        "capture",
        "replica",
        "locality",
        "nats",
        "ddl",
        "stream",
        "scheduler",
        "window",
    ];
    if let Some(part) = only
        && !PARTS.contains(&part)
    {
        return Err(format!(
            "--only {part}: expected one of {}",
            PARTS.join(", ")
        ));
    }
    // `sql` is the three SQL sections together.
    let wanted = |part: &str| {
        only.is_none_or(|o| {
            o == part || (o == "sql" && ["per-row", "physical", "probe"].contains(&part))
        })
    };
    let sizes = if quick {
        Sizes {
            rows: 10_000,
            rounds: 1,
            cdc: CdcBuild::AsTested,
        }
    } else {
        Sizes {
            rows: 1_000_000,
            rounds: 5,
            cdc: CdcBuild::Release,
        }
    };
    let mut report = format!(
        "# cargo xtask bench{}\n\nMachine: {}\n\n",
        if quick { " --quick" } else { "" },
        machine()
    );
    if wanted("codec") {
        codec(quick, &mut report)?;
    }
    if ![
        "per-row",
        "physical",
        "probe",
        "wal",
        "capture",
        "replica",
        "locality",
        "nats",
        "ddl",
        "stream",
        "scheduler",
        "window",
    ]
    .iter()
    .any(|p| wanted(p))
    {
        return write_report(quick, only, &report);
    }

    step("the extension with its bench baselines, in a throwaway PostgreSQL 15 cluster");
    setup::pgrx(&[])?;
    // The full run measures a release build; the smoke test reuses the debug build.
    let mut install = cargo();
    install
        .current_dir(root().join("crates").join("pg-trickle-ext"))
        .args([
            "pgrx",
            "install",
            "--features",
            "bench",
            "--pg-config",
            setup::PG15_CONFIG,
        ]);
    if !quick {
        install.arg("--release");
    }
    exec(&mut install)?;
    let cluster = crate::pg::cluster(&Source::Debian.bindir()?, "pg-bench", 55_390)?;
    if wanted("per-row") {
        per_row(&cluster, &sizes, &mut report)?;
    }
    if wanted("physical") {
        physical(&cluster, &sizes, &mut report)?;
    }
    if wanted("probe") {
        probe(&cluster, &sizes, &mut report)?;
    }
    if wanted("capture") {
        trigger_capture(&cluster, &sizes, &mut report)?;
    }
    if wanted("wal") {
        wal_capture(&cluster, &sizes, &mut report)?;
    }
    if wanted("replica") {
        let work = if quick {
            crate::bench_replica::Work {
                keyed_rows: 10_000,
                keyless_rows: 1_000,
                keyless_changes: 100,
            }
        } else {
            crate::bench_replica::Work {
                keyed_rows: 1_000_000,
                keyless_rows: 100_000,
                keyless_changes: 10_000,
            }
        };
        let binary = rowid_cdc_binary(sizes.cdc)?;
        crate::bench_replica::replica(&cluster, &binary, &work, &mut report)?;
    }
    if wanted("ddl") {
        let work = if quick {
            crate::bench_ddl::Work {
                types: 100,
                tables: 150,
                pairs: 5,
                rounds: 1,
            }
        } else {
            crate::bench_ddl::Work {
                types: 2000,
                tables: 3000,
                pairs: 100,
                rounds: 5,
            }
        };
        crate::bench_ddl::ddl(
            &cluster,
            &work,
            &sql_dir().join("ddl_catalog.sql"),
            &mut report,
        )?;
    }
    if wanted("stream") {
        let work = if quick {
            crate::bench_stream::Work {
                rows: 10_000,
                groups: 100,
                customers: 100,
                rounds: 1,
            }
        } else {
            crate::bench_stream::Work {
                rows: 1_000_000,
                groups: 10_000,
                customers: 10_000,
                rounds: 5,
            }
        };
        crate::bench_stream::stream(&cluster, &work, &mut report)?;
    }
    if wanted("window") {
        let layouts = if quick {
            vec![crate::bench_window::Work {
                rows: 10_000,
                partitions: 1_000,
                touched: 10,
                rounds: 1,
            }]
        } else {
            vec![
                crate::bench_window::Work {
                    rows: 1_000_000,
                    partitions: 100_000,
                    touched: 1_000,
                    rounds: 5,
                },
                crate::bench_window::Work {
                    rows: 1_000_000,
                    partitions: 10_000,
                    touched: 1_000,
                    rounds: 5,
                },
            ]
        };
        crate::bench_window::window(&cluster, &layouts, &mut report)?;
    }
    if wanted("scheduler") {
        // Restarts the cluster with the library preloaded (it stays so for what follows).
        let work = if quick {
            crate::bench_scheduler::Work {
                window_s: 5,
                samples: 3,
            }
        } else {
            crate::bench_scheduler::Work {
                window_s: 60,
                samples: 40,
            }
        };
        crate::bench_scheduler::scheduler_bench(&cluster, &work, &mut report)?;
    }
    if wanted("nats") {
        let binary = rowid_cdc_binary(sizes.cdc)?;
        crate::bench_nats::nats(&cluster, &binary, sizes.rows, sizes.cdc, &mut report)?;
    }
    if wanted("locality") {
        let work = if quick {
            crate::bench_locality::Work {
                rows: 100_000,
                changes: 10_000,
                shared_buffers: "2MB",
            }
        } else {
            crate::bench_locality::Work {
                rows: 1_000_000,
                changes: 100_000,
                shared_buffers: "16MB",
            }
        };
        crate::bench_locality::locality(&work, &mut report)?;
    }
    write_report(quick, only, &report)
}

/// target/bench/report[-quick][-PART].md.
fn write_report(quick: bool, only: Option<&str>, report: &str) -> Result<(), String> {
    let dir = root().join("target").join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let file = dir.join(format!(
        "report{}{}.md",
        if quick { "-quick" } else { "" },
        only.map(|p| format!("-{p}")).unwrap_or_default()
    ));
    std::fs::write(&file, report).map_err(|e| format!("{}: {e}", file.display()))?;
    println!("\n{report}\nwritten to {}", file.display());
    Ok(())
}

/// CPU model, clock and core count, for the report header (`lscpu`, else /proc/cpuinfo).
fn machine() -> String {
    let lscpu = std::process::Command::new("lscpu")
        .env("LC_ALL", "C")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let field = |name: &str| {
        lscpu
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim_start_matches(':').trim().to_string())
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = field("Model name")
        .or_else(|| {
            cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    // Virtual machines often report no maximum clock; the current one is in /proc/cpuinfo.
    let mhz = field("CPU max MHz").or_else(|| {
        cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("cpu MHz"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
    });
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let clock = mhz.map_or_else(|| "clock not reported".into(), |m| format!("{m} MHz"));
    format!(
        "{model}, {clock}, {cores} cores (shared and noisy: compare ratios, not absolute times)"
    )
}
