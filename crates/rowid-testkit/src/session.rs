//! A psql session kept open across steps of a test, so that another session can be made to
//! wait for it (a lock, an open transaction): statements go to its standard input, and
//! `pg_stat_activity`, read through another connection, says where it stands.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::psql::Psql;

/// How long a session may take to reach a state before the test fails.
const REACH_LIMIT: Duration = Duration::from_secs(60);

/// A psql reading statements from its standard input, named `application_name` so that the
/// test can see what it waits for.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    name: String,
}

impl Session {
    /// Opens a session on `db`'s database as `application_name` `name` (stops at its first
    /// error).
    pub fn open(db: &Psql, name: &str) -> Session {
        let mut child = Command::new("psql")
            .args(db.args().split_whitespace())
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .env("PGAPPNAME", name)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        Session {
            child,
            stdin,
            name: name.into(),
        }
    }

    /// Sends `sql` and waits until the session is idle in its transaction again.
    pub fn run(&mut self, db: &Psql, sql: &str) {
        self.send(sql);
        self.wait(db, "idle in transaction");
    }

    /// Sends `sql`, which may fail (the session continues after errors only when told to,
    /// with `\set ON_ERROR_STOP 0`), and waits until the session is idle in its
    /// transaction again, aborted or not.
    pub fn run_may_fail(&mut self, db: &Psql, sql: &str) {
        self.send(sql);
        self.wait(db, "idle in transaction%");
    }

    /// Sends `sql` without waiting.
    pub fn send(&mut self, sql: &str) {
        writeln!(self.stdin, "{sql}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits until the session's `state` is `state` (a `LIKE` pattern), or, for `"Lock"`,
    /// until it waits for a lock (`wait_event_type`).
    pub fn wait(&self, db: &Psql, state: &str) {
        let column = if state == "Lock" {
            "wait_event_type"
        } else {
            "state"
        };
        let sql = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{}' \
             AND {column} LIKE '{state}';",
            self.name
        );
        let t = Instant::now();
        while db.run(&sql).unwrap().trim() != "1" {
            assert!(
                t.elapsed() < REACH_LIMIT,
                "session {} never reached {state}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Commits (a warning, not an error, when no transaction is open), ends the session and
    /// checks that no statement failed.
    pub fn finish(mut self) {
        self.send("COMMIT;");
        drop(self.stdin);
        assert!(
            self.child.wait().unwrap().success(),
            "session {}",
            self.name
        );
    }
}
