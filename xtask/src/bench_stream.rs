//! `cargo xtask bench` section 11: stream tables (issue 34). A source `orders` (`rows` rows,
//! `groups` groups, a customer each of `customers`) and `customers`; per round, 1% of the
//! orders updated, then, alternating which goes first, each DIFFERENTIAL stream table
//! refreshed and a materialized view of the same query refreshed (`REFRESH MATERIALIZED
//! VIEW`, the baseline the issue names): a `GROUP BY` of `groups` groups and a join of
//! `orders` with `customers`. Then IMMEDIATE: one `UPDATE` of 1% of the orders on a source
//! of an IMMEDIATE `GROUP BY` stream table, against the same statement on a copy whose
//! summary a hand-written statement trigger keeps (transition tables, `ON CONFLICT` adding
//! the changes). Every stream table is checked equal to its query at the end.

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

fn median(mut v: Vec<f64>) -> f64 {
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

/// Milliseconds `sql` takes in `db`.
fn timed(cluster: &Cluster, db: &str, sql: &str) -> Result<f64, String> {
    let started = Instant::now();
    cluster.psql().with_db(db).run(sql)?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// Fails unless the stream table `table` (columns `columns`) equals `query` in `db`.
fn equal(
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
    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = vec![
        ("GROUP BY", Vec::new(), Vec::new()),
        ("join", Vec::new(), Vec::new()),
    ];
    for round in 0..work.rounds {
        cluster.psql().with_db(db).run(&format!(
            "UPDATE orders SET amount = amount + 1 WHERE id % 100 = {round};"
        ))?;
        for (i, (mv, st)) in [("mv_groups", "st_groups"), ("mv_join", "st_join")]
            .into_iter()
            .enumerate()
        {
            let refresh_mv = format!("REFRESH MATERIALIZED VIEW {mv};");
            let refresh_st = format!("SELECT pgtrickle.refresh_stream_table('{st}');");
            let (a, b) = if round % 2 == 0 {
                let b = timed(cluster, db, &refresh_mv)?;
                (timed(cluster, db, &refresh_st)?, b)
            } else {
                let a = timed(cluster, db, &refresh_st)?;
                (a, timed(cluster, db, &refresh_mv)?)
            };
            rows[i].1.push(a);
            rows[i].2.push(b);
        }
    }
    equal(cluster, db, "st_groups", "grp, n, s", GROUPS)?;
    equal(cluster, db, "st_join", "id, amount, name", JOIN)?;
    let _ = writeln!(
        report,
        "## 11. Stream tables ({} orders, {} groups, {} customers; median of {} rounds, each \
         after 1% of the orders updated)\n\n\
         | query | DIFFERENTIAL refresh (ms) | REFRESH MATERIALIZED VIEW (ms) | MATVIEW / DIFFERENTIAL |\n\
         |---|---|---|---|",
        work.rows, work.groups, work.customers, work.rounds
    );
    for (name, st, mv) in rows {
        let ratios: Vec<f64> = mv.iter().zip(&st).map(|(m, s)| m / s).collect();
        let _ = writeln!(
            report,
            "| {name} | {:.1} | {:.1} | {:.2} |",
            median(st),
            median(mv),
            median(ratios)
        );
    }
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
        let update = format!("UPDATE orders SET amount = amount + 1 WHERE id % 100 = {round};");
        if round % 2 == 0 {
            a.push(timed(cluster, with, &update)?);
            b.push(timed(cluster, hand, &update)?);
        } else {
            b.push(timed(cluster, hand, &update)?);
            a.push(timed(cluster, with, &update)?);
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
