//! `cargo xtask bench` section 11: stream tables (issue 34). A source `orders` (`rows` rows,
//! `groups` groups, a customer each of `customers`) and `customers`; per round a share of the
//! orders updated (1%, the figure, then 0.1%), then, alternating which goes first,
//! each DIFFERENTIAL stream table refreshed and a materialized view of the same query
//! refreshed (`REFRESH MATERIALIZED VIEW`, the baseline the issue names): a `GROUP BY` of
//! `groups` groups and a join of `orders` with `customers`. Then IMMEDIATE: one `UPDATE` of 1%
//! of the orders on a source of an IMMEDIATE `GROUP BY` stream table, against the same
//! statement on a copy whose summary a hand-written statement trigger keeps (transition
//! tables, `ON CONFLICT` adding the changes). Every stream table is checked equal to its
//! query at the end.
//!
//! Every statement is timed by psql (`\timing`) in one session per database that has run
//! each statement once before: what a refresh costs a session that refreshes again (a
//! scheduler's worker, a pooled connection), not a new connection's start and the extension
//! library's first load into a new backend, which the baselines do not pay. One more round
//! times each refresh in a connection of its own, for comparison.

use std::fmt::Write as _;
use std::time::Instant;

use crate::pg::Cluster;
use crate::shell::step;

/// The size of the workload.
pub struct Work {
    /// Rows of `orders`.
    pub rows: u32,
    /// Groups of the `GROUP BY`.
    pub groups: u32,
    /// Rows of `customers`.
    pub customers: u32,
    /// Rounds (each updates 1% of the orders).
    pub rounds: u32,
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

const GROUPS: &str = "SELECT grp, count(*) AS n, sum(amount) AS s FROM orders GROUP BY grp";
const JOIN: &str = "SELECT o.id, o.amount, c.name FROM orders o JOIN customers c ON c.cid = o.cust";

/// The sources of `work` in database `db` of `cluster`.
fn sources(cluster: &Cluster, db: &str, work: &Work) -> Result<(), String> {
    let psql = cluster.psql();
    psql.run(&format!(
        "DROP DATABASE IF EXISTS {db};\nCREATE DATABASE {db};"
    ))?;
    psql.with_db(db)
        .run(&format!(
            "CREATE EXTENSION pg_trickle_ext;
         CREATE TABLE customers (cid int4 PRIMARY KEY, name text NOT NULL);
         INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, {c}) g;
         CREATE TABLE orders (id int8 PRIMARY KEY, grp int4 NOT NULL, cust int4 NOT NULL,
                              amount numeric NOT NULL);
         INSERT INTO orders SELECT g, g % {groups}, g % {c} + 1, (g % 997)::numeric + 0.25
           FROM generate_series(1, {rows}) g;
         VACUUM ANALYZE customers; VACUUM ANALYZE orders;",
            c = work.customers,
            groups = work.groups,
            rows = work.rows,
        ))
        .map(|_| ())
}

/// Milliseconds `sql` takes in `db`, psql started for it (a new connection and backend).
fn timed(cluster: &Cluster, db: &str, sql: &str) -> Result<f64, String> {
    let started = Instant::now();
    cluster.psql().with_db(db).run(sql)?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// Runs `script` (with `\timing on` and `\echo timed KEY` before each timed statement) in
/// one psql session of `db`; each key with the milliseconds psql timed for the statement
/// after it, in order.
pub(crate) fn session_timings(
    cluster: &Cluster,
    db: &str,
    script: &str,
) -> Result<Vec<(String, f64)>, String> {
    let out = cluster.psql().with_db(db).run(script)?;
    let timings = parse_timings(&out);
    if timings.len() != script.matches("\\echo timed ").count() {
        return Err(format!(
            "psql timed {} of the statements: {out}",
            timings.len()
        ));
    }
    Ok(timings)
}

/// The `(key, ms)` pairs of psql's output: a `timed KEY` line, then the first `Time: N ms`
/// line after it (statements without a key before them are not taken).
fn parse_timings(out: &str) -> Vec<(String, f64)> {
    let mut timings = Vec::new();
    let mut pending: Option<String> = None;
    for line in out.lines() {
        if let Some(key) = line.strip_prefix("timed ") {
            pending = Some(key.to_string());
        } else if let Some(ms) = line
            .strip_prefix("Time: ")
            .and_then(|t| t.split(" ms").next())
            .and_then(|t| t.trim().parse::<f64>().ok())
            && let Some(key) = pending.take()
        {
            timings.push((key, ms));
        }
    }
    timings
}

/// Fails unless the stream table `table` (columns `columns`) equals `query` in `db`.
pub(crate) fn equal(
    cluster: &Cluster,
    db: &str,
    table: &str,
    columns: &str,
    query: &str,
) -> Result<(), String> {
    let out = cluster.psql().with_db(db).run(&format!(
        "SELECT count(*) FROM ((SELECT {columns} FROM {table} EXCEPT ALL {query})
           UNION ALL ({query} EXCEPT ALL SELECT {columns} FROM {table})) d;"
    ))?;
    if out.trim() == "0" {
        Ok(())
    } else {
        Err(format!(
            "{table} differs from its query in {} rows",
            out.trim()
        ))
    }
}

/// Runs section 11 on `cluster` (the extension installed) and appends it to `report`.
pub fn stream(cluster: &Cluster, work: &Work, report: &mut String) -> Result<(), String> {
    step(&format!(
        "11. stream tables: DIFFERENTIAL against REFRESH MATERIALIZED VIEW, IMMEDIATE against \
         a hand-written trigger ({} orders, {} groups, {} customers, {} rounds)",
        work.rows, work.groups, work.customers, work.rounds
    ));
    let db = "stream_bench";
    sources(cluster, db, work)?;
    cluster.psql().with_db(db).run(&format!(
        "CREATE MATERIALIZED VIEW mv_groups AS {GROUPS};
         CREATE MATERIALIZED VIEW mv_join AS {JOIN};
         SELECT pgtrickle.create_stream_table('st_groups', '{GROUPS}',
           refresh_mode => 'DIFFERENTIAL');
         SELECT pgtrickle.create_stream_table('st_join', '{JOIN}',
           refresh_mode => 'DIFFERENTIAL');"
    ))?;
    let pairs = [
        ("GROUP BY", "mv_groups", "st_groups"),
        ("join", "mv_join", "st_join"),
    ];
    let refresh_mv = |mv: &str| format!("REFRESH MATERIALIZED VIEW {mv};");
    let refresh_st = |st: &str| format!("SELECT pgtrickle.refresh_stream_table('{st}');");
    // One session: every statement once first, then the rounds; `(query, churn)` -> times.
    let mut script = String::from("\\timing on\n");
    for (_, mv, st) in pairs {
        let _ = writeln!(script, "{}\n{}", refresh_mv(mv), refresh_st(st));
    }
    let churns = [(100u32, "1%"), (1000, "0.1%")];
    for (modulus, _) in churns {
        for round in 0..work.rounds {
            let _ = writeln!(
                script,
                "UPDATE orders SET amount = amount + 1 WHERE id % {modulus} = {round};"
            );
            for (name, mv, st) in pairs {
                let (first, second) = if round % 2 == 0 {
                    (("mv", refresh_mv(mv)), ("st", refresh_st(st)))
                } else {
                    (("st", refresh_st(st)), ("mv", refresh_mv(mv)))
                };
                for (side, sql) in [first, second] {
                    let _ = writeln!(script, "\\echo timed {name}|{modulus}|{side}\n{sql}");
                }
            }
        }
    }
    let timings = session_timings(cluster, db, &script)?;
    let _ = writeln!(
        report,
        "## 11. Stream tables ({} orders, {} groups, {} customers; median of {} rounds per \
         share, each after that share of the orders updated; one warm session, psql's \
         `\\timing`)\n\n\
         | query | orders updated | DIFFERENTIAL refresh (ms) | REFRESH MATERIALIZED VIEW (ms) | MATVIEW / DIFFERENTIAL |\n\
         |---|---|---|---|---|",
        work.rows, work.groups, work.customers, work.rounds
    );
    for (modulus, share) in churns {
        for (name, _, _) in pairs {
            let of = |side: &str| -> Vec<f64> {
                let key = format!("{name}|{modulus}|{side}");
                timings
                    .iter()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, ms)| *ms)
                    .collect()
            };
            let (st, mv) = (of("st"), of("mv"));
            let ratios: Vec<f64> = mv.iter().zip(&st).map(|(m, s)| m / s).collect();
            let _ = writeln!(
                report,
                "| {name} | {share} | {:.1} | {:.1} | {:.2} |",
                median(st),
                median(mv),
                median(ratios)
            );
        }
    }
    // The same once more, each refresh in a connection of its own (psql per statement).
    cluster.psql().with_db(db).run(&format!(
        "UPDATE orders SET amount = amount + 1 WHERE id % 100 = {};",
        work.rounds
    ))?;
    let _ = writeln!(
        report,
        "\nOne more round (1%), each refresh in a new connection (psql started per statement, \
         the extension loaded into a new backend):\n\n\
         | query | DIFFERENTIAL refresh (ms) | REFRESH MATERIALIZED VIEW (ms) | MATVIEW / DIFFERENTIAL |\n\
         |---|---|---|---|"
    );
    for (name, mv, st) in pairs {
        let m = timed(cluster, db, &refresh_mv(mv))?;
        let d = timed(cluster, db, &refresh_st(st))?;
        let _ = writeln!(report, "| {name} | {d:.1} | {m:.1} | {:.2} |", m / d);
    }
    equal(cluster, db, "st_groups", "grp, n, s", GROUPS)?;
    equal(cluster, db, "st_join", "id, amount, name", JOIN)?;
    immediate(cluster, work, report)
}

/// IMMEDIATE: one UPDATE of 1% of the orders with an IMMEDIATE `GROUP BY` stream table on
/// them, against the same statement with a hand-written statement trigger keeping the same
/// summary.
fn immediate(cluster: &Cluster, work: &Work, report: &mut String) -> Result<(), String> {
    let (with, hand) = ("stream_immediate", "stream_hand");
    sources(cluster, with, work)?;
    sources(cluster, hand, work)?;
    cluster.psql().with_db(with).run(&format!(
        "SELECT pgtrickle.create_stream_table('st_now', '{GROUPS}', refresh_mode => 'IMMEDIATE');"
    ))?;
    cluster.psql().with_db(hand).run(&format!(
        "CREATE TABLE hand_groups (grp int4 PRIMARY KEY, n int8 NOT NULL, s numeric);
         INSERT INTO hand_groups {GROUPS};
         CREATE FUNCTION hand_maintain() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO hand_groups AS h
             SELECT grp, sum(w), sum(w * amount) FROM (
               SELECT grp, -1 AS w, amount FROM old_rows
               UNION ALL SELECT grp, 1, amount FROM new_rows) d GROUP BY grp
           ON CONFLICT (grp) DO UPDATE SET n = h.n + excluded.n, s = h.s + excluded.s;
           DELETE FROM hand_groups WHERE n = 0;
           RETURN NULL;
         END $$;
         CREATE TRIGGER hand AFTER UPDATE ON orders
           REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
           FOR EACH STATEMENT EXECUTE FUNCTION hand_maintain();"
    ))?;
    let mut a = Vec::new();
    let mut b = Vec::new();
    for round in 0..work.rounds {
        // A session each, warmed by the same statement on no rows (the statement triggers
        // fire, their plans are made), then the timed one.
        let update = format!(
            "\\timing on\nUPDATE orders SET amount = amount + 1 WHERE false;\n\\echo timed update\n\
             UPDATE orders SET amount = amount + 1 WHERE id % 100 = {round};"
        );
        let ms =
            |db: &str| -> Result<f64, String> { Ok(session_timings(cluster, db, &update)?[0].1) };
        if round % 2 == 0 {
            a.push(ms(with)?);
            b.push(ms(hand)?);
        } else {
            b.push(ms(hand)?);
            a.push(ms(with)?);
        }
    }
    equal(cluster, with, "st_now", "grp, n, s", GROUPS)?;
    equal(cluster, hand, "hand_groups", "grp, n, s", GROUPS)?;
    let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
    let _ = writeln!(
        report,
        "\n| IMMEDIATE: one UPDATE of {} orders | IMMEDIATE stream table (ms) | hand-written \
         statement trigger (ms) | IMMEDIATE / hand-written |\n|---|---|---|---|\n\
         | `{GROUPS}` | {:.1} | {:.1} | {:.2} |\n",
        work.rows / 100,
        median(a),
        median(b),
        median(ratios)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_timings;

    #[test]
    fn each_key_takes_the_time_of_the_statement_after_it() {
        // psql -A -t with \timing on: an untimed warm-up, then two keyed statements (one
        // printing a row), times of a second and more in psql's long form.
        let out = "Time: 3.100 ms\nUPDATE 0\ntimed join|100|mv\nREFRESH MATERIALIZED VIEW\n\
                   Time: 1234.567 ms (00:01.235)\ntimed join|100|st\n\nTime: 12.5 ms\n";
        assert_eq!(
            parse_timings(out),
            vec![
                ("join|100|mv".to_string(), 1234.567),
                ("join|100|st".to_string(), 12.5)
            ]
        );
    }
}
