//! `cargo xtask bench` section 10: what the extension's DDL event triggers cost a DDL (issue
//! 36). Two databases hold the same large catalog (domains, composites of them, tables of
//! both: `benches/sql/ddl_catalog.sql`) and a table `hot`, published; in one of them the
//! extension runs with identity messages on and `hot` captured. Each workload (pairs of DDL
//! that undo each other, so every round starts from the same catalog) runs in both, in
//! turn, `rounds` times; the report gives the medians and what the triggers add per DDL.
//! The type closure (which tables hold a type an `ALTER TYPE` changed) is the part whose
//! cost could grow with the catalog: it walks `pg_depend`'s index, so it does not.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use crate::pg::Cluster;
use crate::shell::step;

/// The size of the catalog and of each workload.
pub struct Work {
    /// Domains, and composites of them (one each).
    pub types: u32,
    /// Tables of ten columns (one composite, one domain among them).
    pub tables: u32,
    /// Pairs of DDL per workload.
    pub pairs: u32,
    /// Alternating rounds.
    pub rounds: u32,
}

/// The workloads: a name, what it does, and its `i`-th pair of statements.
type Workload = (&'static str, &'static str, fn(u32) -> String);

const WORKLOADS: [Workload; 4] = [
    (
        "alter-table",
        "ALTER TABLE ... ALTER COLUMN ... SET / DROP DEFAULT of the captured, published table",
        |i| {
            format!(
                "ALTER TABLE hot ALTER COLUMN v SET DEFAULT {i};\n\
                 ALTER TABLE hot ALTER COLUMN v DROP DEFAULT;\n"
            )
        },
    ),
    (
        "alter-type-unused",
        "ALTER TYPE ... RENAME ATTRIBUTE of a composite no table holds",
        |_| {
            "ALTER TYPE lone RENAME ATTRIBUTE a TO b;\n\
             ALTER TYPE lone RENAME ATTRIBUTE b TO a;\n"
                .into()
        },
    ),
    (
        "alter-type-used",
        "ALTER TYPE ... RENAME ATTRIBUTE ... CASCADE of a composite two tables hold",
        |_| {
            "ALTER TYPE c1 RENAME ATTRIBUTE b TO bb CASCADE;\n\
             ALTER TYPE c1 RENAME ATTRIBUTE bb TO b CASCADE;\n"
                .into()
        },
    ),
    (
        "create-drop",
        "CREATE TABLE (with a primary key) and DROP TABLE",
        |i| format!("CREATE TABLE n{i} (id int8 PRIMARY KEY, v int4);\nDROP TABLE n{i};\n"),
    ),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs section 10 on `cluster` (the extension installed), with the catalog script `catalog`
/// (`benches/sql/ddl_catalog.sql`), and appends it to `report`.
pub fn ddl(
    cluster: &Cluster,
    work: &Work,
    catalog: &Path,
    report: &mut String,
) -> Result<(), String> {
    step(&format!(
        "10. DDL under the extension's event triggers ({} domains and composites, {} tables; \
         {} DDL per workload, {} rounds)",
        work.types,
        work.tables,
        2 * work.pairs,
        work.rounds
    ));
    let psql = cluster.psql();
    for db in ["ddl_with", "ddl_without"] {
        psql.run(&format!(
            "DROP DATABASE IF EXISTS {db};\nCREATE DATABASE {db};"
        ))?;
        psql.with_db(db).file(
            catalog,
            &[
                ("types", work.types.to_string()),
                ("tables", work.tables.to_string()),
            ],
        )?;
    }
    psql.with_db("ddl_with").run(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         SELECT pgtrickle.capture_table('hot');",
    )?;
    let size = psql
        .with_db("ddl_with")
        .run("SELECT (SELECT count(*) FROM pg_type) || ' types, ' || (SELECT count(*) FROM pg_attribute) || ' attributes';")?;
    let _ = writeln!(
        report,
        "## 10. DDL under the extension's event triggers ({} DDL per workload, median of {} \
         alternating rounds)\n\nCatalog: {} (`benches/sql/ddl_catalog.sql`). With: the \
         extension, identity messages on, `hot` captured and published; without: the same \
         catalog, `hot` published.\n\n\
         | workload | with (ms) | without (ms) | added per DDL (ms) | with / without |\n\
         |---|---|---|---|---|",
        2 * work.pairs,
        work.rounds,
        size.trim()
    );
    for (name, what, pair) in WORKLOADS {
        let script: String = (0..work.pairs).map(pair).collect();
        let mut with = Vec::new();
        let mut without = Vec::new();
        for _ in 0..work.rounds {
            for (db, times) in [("ddl_with", &mut with), ("ddl_without", &mut without)] {
                let started = Instant::now();
                psql.with_db(db).run(&script)?;
                times.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        let ratios: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a / b).collect();
        let (a, b) = (median(with), median(without));
        let _ = writeln!(
            report,
            "| {name}: {what} | {a:.0} | {b:.0} | {:.2} | {:.1} |",
            (a - b) / f64::from(2 * work.pairs),
            median(ratios)
        );
    }
    report.push('\n');
    Ok(())
}
