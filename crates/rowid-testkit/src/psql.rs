//! psql against one cluster: the runner every server-backed test and `xtask` use.
//!
//! Server-backed tests get their cluster from `cargo xtask test`, which passes psql's
//! connection arguments in [`ARGS_ENV`] and puts the cluster's own `psql` first on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable holding psql's connection arguments (`-h SOCKDIR -p PORT -U postgres
/// -d postgres`), set by `cargo xtask test` for the tests it runs against a cluster.
pub const ARGS_ENV: &str = "ROWID_ORACLE_PSQL_ARGS";

/// How to reach one cluster with psql.
#[derive(Clone, Debug)]
pub struct Psql {
    program: PathBuf,
    args: Vec<String>,
}

/// Distinguishes the script files of concurrent runs in one process.
static SCRIPT: AtomicU64 = AtomicU64::new(0);

impl Psql {
    /// `program` (a psql binary) with connection arguments `args`.
    pub fn new(program: impl Into<PathBuf>, args: &str) -> Psql {
        Psql {
            program: program.into(),
            args: args.split_whitespace().map(String::from).collect(),
        }
    }

    /// The cluster `cargo xtask test` started: `psql` from `PATH`, arguments from
    /// [`ARGS_ENV`].
    pub fn from_env() -> Result<Psql, String> {
        let args = std::env::var(ARGS_ENV)
            .map_err(|_| format!("{ARGS_ENV} is not set: run through `cargo xtask test`"))?;
        Ok(Psql::new("psql", &args))
    }

    /// The connection arguments.
    pub fn args(&self) -> String {
        self.args.join(" ")
    }

    /// A new, empty database `dbname` on the cluster of [`Psql::from_env`] (dropped first if
    /// it exists, sessions and all), and psql for it.
    pub fn fresh_database(dbname: &str) -> Result<Psql, String> {
        let server = Psql::from_env()?;
        server.run(&format!(
            "DROP DATABASE IF EXISTS {dbname} WITH (FORCE); CREATE DATABASE {dbname};"
        ))?;
        Ok(server.with_db(dbname))
    }

    /// [`Psql::fresh_database`], after dropping the replication slot `slot` if an earlier run
    /// left it (a slot of a database keeps it from being dropped).
    pub fn fresh_database_without_slot(dbname: &str, slot: &str) -> Result<Psql, String> {
        Psql::from_env()?.run(&format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = {};",
            crate::sql::quote(slot)
        ))?;
        Psql::fresh_database(dbname)
    }

    /// The same server and user, database `dbname`.
    pub fn with_db(&self, dbname: &str) -> Psql {
        self.with_arg("-d", dbname)
    }

    /// The same server and database, connected as `user`.
    pub fn with_user(&self, user: &str) -> Psql {
        self.with_arg("-U", user)
    }

    /// The same arguments with connection option `flag` (`-d`, `-U`) set to `value`.
    fn with_arg(&self, flag: &str, value: &str) -> Psql {
        let mut args = Vec::with_capacity(self.args.len() + 2);
        let mut words = self.args.iter();
        while let Some(w) = words.next() {
            if w == flag {
                words.next();
            } else {
                args.push(w.clone());
            }
        }
        args.extend([flag.to_string(), value.to_string()]);
        Psql {
            program: self.program.clone(),
            args,
        }
    }

    /// A libpq connection string for the same server, user and database (from `-h`, `-p`,
    /// `-U`, `-d`).
    pub fn dsn(&self) -> String {
        let mut parts = Vec::new();
        let mut words = self.args.iter();
        while let Some(w) = words.next() {
            let key = match w.as_str() {
                "-h" => "host",
                "-p" => "port",
                "-U" => "user",
                "-d" => "dbname",
                _ => continue,
            };
            if let Some(v) = words.next() {
                parts.push(format!("{key}={v}"));
            }
        }
        parts.join(" ")
    }

    fn output(&self, extra: &[&str], what: &str) -> Result<String, String> {
        let out = Command::new(&self.program)
            .args(&self.args)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .args(extra)
            .output()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "psql {what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// `columns` of every row of the change buffers `schema.prefix_<source oid>` (rowid-cdc's
    /// PostgreSQL sink keeps one per source table), in `commit_lsn, seq` order: one list, as
    /// a single buffer would hold them (`columns` may name the row as `c`; values must not
    /// contain `|`). Empty while there is no buffer yet.
    pub fn buffer_rows(&self, schema: &str, prefix: &str, columns: &str) -> Result<String, String> {
        let tables = self.run(&format!(
            "SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = '{schema}' AND c.relname ~ '^{prefix}_[0-9]+$' ORDER BY 1;"
        ))?;
        let selects: Vec<String> = tables
            .lines()
            .filter(|t| !t.is_empty())
            .map(|t| format!("SELECT {columns}, commit_lsn AS _c, seq AS _s FROM {t} c"))
            .collect();
        if selects.is_empty() {
            return Ok(String::new());
        }
        self.run(&format!(
            "SELECT * FROM ({}) b ORDER BY _c, _s;",
            selects.join(" UNION ALL ")
        ))
        .map(|rows| {
            rows.lines()
                .map(|l| {
                    // Drop the two ordering columns psql printed last.
                    let mut cells: Vec<&str> = l.split('|').collect();
                    cells.truncate(cells.len().saturating_sub(2));
                    cells.join("|") + "\n"
                })
                .collect()
        })
    }

    /// Runs `script` and returns its rows unaligned, without headers (`-A -t`): one line per
    /// row, columns separated by `|`.
    pub fn run(&self, script: &str) -> Result<String, String> {
        let n = SCRIPT.fetch_add(1, Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!("rowid-psql-{}-{n}.sql", std::process::id()));
        std::fs::write(&file, script).map_err(|e| format!("{}: {e}", file.display()))?;
        let file_arg = file.to_string_lossy().into_owned();
        let out = self.output(&["-A", "-t", "-f", &file_arg], "script");
        let _ = std::fs::remove_file(&file);
        out
    }

    /// How many rows one query gives and the other does not, as multisets, both ways
    /// (`EXCEPT ALL` each way): 0 when they hold the same rows as often. Panics when psql
    /// fails (test code).
    pub fn multiset_difference(&self, left: &str, right: &str) -> i64 {
        self.run(&format!(
            "SELECT count(*) FROM (({left}) EXCEPT ALL ({right}) \
             UNION ALL (({right}) EXCEPT ALL ({left}))) AS d;"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("a count: {e}"))
    }

    /// Runs `sql` every 50 ms until its output is `expected`; panics naming `what` after 60 s
    /// (test code).
    pub fn wait_for(&self, sql: &str, expected: &str, what: &str) {
        let started = std::time::Instant::now();
        while self.run(sql).unwrap_or_else(|e| panic!("{e}")).trim() != expected {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "{what}: still not {expected:?} after 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Runs `sql` and returns psql's aligned, human-readable output (for demos).
    pub fn show(&self, sql: &str) -> Result<String, String> {
        self.output(&["-P", "pager=off", "-c", sql], "command")
    }

    /// Runs the script file `path` with `-v name=value` variables.
    pub fn file(&self, path: &Path, vars: &[(&str, String)]) -> Result<String, String> {
        let mut extra = vec!["-f".to_string(), path.to_string_lossy().into_owned()];
        for (name, value) in vars {
            extra.push("-v".into());
            extra.push(format!("{name}={value}"));
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        self.output(&extra, &path.display().to_string())
    }
}

/// Runs `script` on the cluster of [`Psql::from_env`]; panics with psql's message when it
/// fails (test code).
pub fn run(script: &str) -> String {
    Psql::from_env()
        .and_then(|p| p.run(script))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::Psql;

    #[test]
    fn dsn_and_database_follow_the_arguments() {
        let p = Psql::new("psql", "-h /tmp/x -p 5499 -U postgres -d postgres");
        let q = p.with_db("other");
        assert_eq!(q.args(), "-h /tmp/x -p 5499 -U postgres -d other");
        assert_eq!(q.dsn(), "host=/tmp/x port=5499 user=postgres dbname=other");
    }
}
