//! `cargo xtask bench` section 13: window functions in a stream table (issue 35). A source
//! `events` of `rows` rows in `partitions` partitions (`part`), each row with an order `ord`
//! and a value `v`; per round 1% of the rows updated, all of them in `touched` partitions
//! (their `v` and `ord` changed), then, alternating which goes first, the DIFFERENTIAL stream
//! table of the window query refreshed and a materialized view of the same query refreshed
//! (`REFRESH MATERIALIZED VIEW`, the baseline the issue names). Timed by psql (`\timing`) in
//! one warm session, as section 11. The stream table is checked equal to its query at the
//! end.
//!
//! Two layouts: `rows / partitions` rows per partition, with every row of a touched
//! partition changed when `touched * rows / partitions` is 1% of the rows, or a tenth of
//! each touched partition's rows changed when the partitions are ten times larger.

use std::fmt::Write as _;

use crate::bench_stream::{equal, median, session_timings};
use crate::pg::Cluster;
use crate::shell::step;

/// The size of one layout.
pub struct Work {
    /// Rows of `events`.
    pub rows: u32,
    /// Partitions of `events`.
    pub partitions: u32,
    /// Partitions whose rows a round changes (1% of the rows in all).
    pub touched: u32,
    /// Rounds.
    pub rounds: u32,
}

const WINDOW: &str = "SELECT id, part, v, \
     rank() OVER (PARTITION BY part ORDER BY v DESC) AS r, \
     row_number() OVER (PARTITION BY part ORDER BY ord, id) AS rn, \
     sum(v) OVER (PARTITION BY part ORDER BY ord, id) AS running \
     FROM events";

/// Runs section 13 for each layout on `cluster` (the extension installed) and appends it to
/// `report`.
pub fn window(cluster: &Cluster, layouts: &[Work], report: &mut String) -> Result<(), String> {
    let _ = writeln!(
        report,
        "## 13. Window functions (1% of the rows updated per round, in a share of the \
         partitions; median of the rounds; one warm session, psql's `\\timing`)\n\n\
         `{WINDOW}`\n\n\
         | rows | partitions | partitions touched | rows changed per touched partition | \
         DIFFERENTIAL refresh (ms) | REFRESH MATERIALIZED VIEW (ms) | MATVIEW / DIFFERENTIAL | \
         REFRESH MATERIALIZED VIEW with `jit = off` (ms) |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for work in layouts {
        layout(cluster, work, report)?;
    }
    report.push('\n');
    Ok(())
}

fn layout(cluster: &Cluster, work: &Work, report: &mut String) -> Result<(), String> {
    let changed = work.rows / 100;
    let per_partition = changed / work.touched.max(1);
    step(&format!(
        "13. window functions: DIFFERENTIAL against REFRESH MATERIALIZED VIEW ({} rows, {} \
         partitions, {} rows changed in {} of them, {} rounds)",
        work.rows, work.partitions, changed, work.touched, work.rounds
    ));
    let db = "window_bench";
    let psql = cluster.psql();
    psql.run(&format!(
        "DROP DATABASE IF EXISTS {db};\nCREATE DATABASE {db};"
    ))?;
    // Row g is in partition g % partitions; its rank within the partition is g / partitions.
    psql.with_db(db).run(&format!(
        "CREATE EXTENSION pg_trickle_ext;
         CREATE TABLE events (id int8 PRIMARY KEY, part int4 NOT NULL, ord int4 NOT NULL,
                              v numeric NOT NULL);
         INSERT INTO events SELECT g, g % {p}, (g::int8 * 7919) % 1000, (g % 997)::numeric + 0.25
           FROM generate_series(0, {n} - 1) g;
         CREATE INDEX events_part ON events (part);
         VACUUM ANALYZE events;
         CREATE MATERIALIZED VIEW mv_window AS {WINDOW};
         SELECT pgtrickle.create_stream_table('st_window', '{WINDOW}',
           refresh_mode => 'DIFFERENTIAL');",
        p = work.partitions,
        n = work.rows,
    ))?;
    let refresh_mv = "REFRESH MATERIALIZED VIEW mv_window;";
    let refresh_st = "SELECT pgtrickle.refresh_stream_table('st_window');";
    let mut script = format!("\\timing on\n{refresh_mv}\n{refresh_st}\n");
    for round in 0..work.rounds {
        // The touched partitions of this round, and `per_partition` rows of each (the rows
        // of rank below `per_partition` within them).
        let first = round * work.touched;
        let _ = writeln!(
            script,
            "UPDATE events SET v = v + 1, ord = (ord + 500) % 1000 \
             WHERE part >= {first} AND part < {last} AND id < {p}::int8 * {per_partition};",
            last = first + work.touched,
            p = work.partitions,
        );
        let (a, b) = if round % 2 == 0 {
            (("mv", refresh_mv), ("st", refresh_st))
        } else {
            (("st", refresh_st), ("mv", refresh_mv))
        };
        for (side, sql) in [a, b] {
            let _ = writeln!(script, "\\echo timed {side}\n{sql}");
        }
    }
    // The baseline once more without JIT (the stream table's refresh runs without it), on
    // the data of the last round.
    script.push_str("SET jit = off;\n");
    script.push_str(refresh_mv);
    script.push('\n');
    for _ in 0..work.rounds {
        let _ = writeln!(script, "\\echo timed mv-nojit\n{refresh_mv}");
    }
    let timings = session_timings(cluster, db, &script)?;
    let of = |side: &str| -> Vec<f64> {
        timings
            .iter()
            .filter(|(k, _)| k == side)
            .map(|(_, ms)| *ms)
            .collect()
    };
    let (st, mv, mv_nojit) = (of("st"), of("mv"), of("mv-nojit"));
    let ratios: Vec<f64> = mv.iter().zip(&st).map(|(m, s)| m / s).collect();
    equal(
        cluster,
        db,
        "st_window",
        "id, part, v, r, rn, running",
        WINDOW,
    )?;
    let _ = writeln!(
        report,
        "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} |",
        work.rows,
        work.partitions,
        work.touched,
        per_partition,
        median(st.clone()),
        median(mv),
        median(ratios),
        median(mv_nojit),
    );
    Ok(())
}
