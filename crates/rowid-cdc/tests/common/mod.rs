//! Helpers of the tests that run the `rowid-cdc` command against a live server: scratch
//! directories, the command with a JSON-lines sink, waiting for lines and for the slot.

// Each test binary uses some of them.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rowid_testkit::psql::Psql;
use serde_json::Value;

/// A fresh database `name`, its slot `slot` dropped first if an earlier run left it.
pub fn database(name: &str, slot: &str) -> Psql {
    Psql::fresh_database_without_slot(name, slot).unwrap()
}

pub fn one(db: &Psql, sql: &str) -> String {
    db.run(sql).unwrap().trim().to_string()
}

/// A scratch directory, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("rowid-cdc-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running consumer, killed when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    /// Waits for the process to end by itself; its status and stderr.
    pub fn finish(mut self, within: Duration) -> (bool, String) {
        let t = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = self.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return (status.success(), err);
            }
            assert!(t.elapsed() < within, "rowid-cdc did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The guard of a wait loop started at `started`: fails the test with `what` and how the
    /// process ended, as soon as it ended or `limit` passed.
    pub fn still_within(&mut self, started: Instant, limit: Duration, what: &str) {
        let ended = self.0.try_wait().unwrap().is_some();
        assert!(
            !ended && started.elapsed() < limit,
            "{what}: {}",
            self.report()
        );
    }

    /// What a failed wait should say about it: "still running", or how it ended and what
    /// it printed on stderr.
    pub fn report(&mut self) -> String {
        match self.0.try_wait().unwrap() {
            None => "rowid-cdc is still running".to_string(),
            Some(status) => {
                let mut err = String::new();
                if let Some(mut e) = self.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                format!("rowid-cdc ended ({status}): {err}")
            }
        }
    }

    /// What a wait that timed out should say about it: how it ended, or that it was still
    /// running (then killed), and the last lines it printed on stderr either way.
    pub fn kill_and_report(&mut self) -> String {
        let running = self.0.try_wait().unwrap().is_none();
        if running {
            let _ = self.0.kill();
        }
        let status = self.0.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.0.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        let lines: Vec<&str> = err.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "rowid-cdc {} ({} bytes, {} lines on stderr; the last ones:)\n{tail}",
            if running {
                "was still running: killed".to_string()
            } else {
                format!("had ended ({status})")
            },
            err.len(),
            lines.len()
        )
    }

    /// Stops it with SIGINT (a clean stop after the current message) and returns stderr.
    pub fn interrupt(self) -> String {
        let pid = self.0.id().to_string();
        Command::new("kill").args(["-INT", &pid]).status().unwrap();
        self.finish(Duration::from_secs(30)).1
    }
}

/// `rowid-cdc` for `db`'s slot `slot` and publication `publication`, state and lines in `dir`.
pub struct Cdc<'a> {
    pub dsn: String,
    pub slot: &'a str,
    pub publication: &'a str,
    pub dir: &'a Dir,
}

impl Cdc<'_> {
    pub fn command(&self, extra: &[&str]) -> Command {
        let lines = format!("jsonl:{}", self.dir.file("changes.jsonl").display());
        self.command_into(&lines, extra)
    }

    /// The command writing into `sink` instead of the JSON lines. The binary is this build's,
    /// or the one `ROWID_CDC_TEST_BIN` names (to run a test against another build: that a test
    /// fails on the code before a fix).
    pub fn command_into(&self, sink: &str, extra: &[&str]) -> Command {
        let binary = std::env::var_os("ROWID_CDC_TEST_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_rowid-cdc").into());
        let mut c = Command::new(binary);
        c.args([
            "--dsn",
            &self.dsn,
            "--slot",
            self.slot,
            "--publication",
            self.publication,
        ])
        .arg("--state")
        .arg(self.dir.file("cdc.state"))
        .arg("--sink")
        .arg(sink)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        c
    }

    /// Waits until the state file says the copy under the slot's exported snapshot is done
    /// (`"snapshot": "done"`): before that a kill leaves a snapshot no restart can resume
    /// (refused by design), so a test that kills at random must wait for this first. Fails
    /// with `running`'s stderr as soon as it ended.
    pub fn wait_snapshot_copied(&self, running: &mut Running) {
        let t = Instant::now();
        loop {
            let state: Value = std::fs::read_to_string(self.dir.file("cdc.state"))
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(Value::Null);
            if state["snapshot"] == "done" {
                return;
            }
            if running.0.try_wait().unwrap().is_some() {
                panic!("the consumer ended: {}", running.report());
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "the snapshot is not done after 120 s: {state}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the consumer has its slot at a consistent point (the state file exists:
    /// it is written only after the slot was created or resumed), so that what a test commits
    /// from now on reaches it through the stream, not through a snapshot's copy. (A slot shows
    /// `active` while it is still being created, waiting for running transactions to end:
    /// a change committed then is before its consistent point.) Fails with `running`'s stderr
    /// as soon as it ended.
    pub fn wait_started(&self, running: &mut Running) {
        let t = Instant::now();
        while !self.dir.file("cdc.state").exists() {
            running.still_within(
                t,
                Duration::from_secs(120),
                "the slot never got to a consistent point",
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the command writing into `sink` and waits until its slot is at a consistent
    /// point ([`Cdc::wait_started`]).
    pub fn started(&self, sink: &str, extra: &[&str]) -> Running {
        let mut running = Running(self.command_into(sink, extra).spawn().unwrap());
        self.wait_started(&mut running);
        running
    }

    pub fn spawn(&self, extra: &[&str]) -> Running {
        Running(self.command(extra).spawn().unwrap())
    }

    /// Runs to its end (a refusal); status and stderr. Killed, and reported as a failure
    /// with what it printed, if it is still running after 60 s.
    pub fn run(&self, extra: &[&str]) -> Output {
        self.run_child(self.command(extra))
    }

    /// [`Cdc::run`] writing into `sink`.
    pub fn run_into(&self, sink: &str, extra: &[&str]) -> Output {
        self.run_child(self.command_into(sink, extra))
    }

    fn run_child(&self, mut command: Command) -> Output {
        let mut child = command.spawn().unwrap();
        let t = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "rowid-cdc was still running after 60 s instead of refusing: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    }

    /// The complete JSON lines written so far.
    pub fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.file("changes.jsonl")).unwrap_or_default();
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until `n` lines were written.
    pub fn wait_lines(&self, n: usize) -> Vec<Value> {
        let t = Instant::now();
        loop {
            let lines = self.lines();
            if lines.len() >= n {
                return lines;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{} of {n} lines: {lines:?}",
                lines.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether `slot` is held by a walsender and past its consistent point: a slot being created
/// is `active` while it waits for running transactions to end, with no `confirmed_flush_lsn`
/// yet, and a change committed then precedes its consistent point (it is in the exported
/// snapshot, not the stream: a test that writes once the slot is merely active can lose its
/// first change, or see it copied instead of streamed).
pub fn streaming_sql(slot: &str) -> String {
    format!(
        "SELECT active AND confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots \
         WHERE slot_name = '{slot}';"
    )
}

/// Waits until the slot is held by a walsender past its consistent point (the consumer is
/// streaming).
pub fn wait_active(db: &Psql, slot: &str) {
    let t = Instant::now();
    while one(db, &streaming_sql(slot)) != "t" {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "slot {slot} never active"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `running` streams from `slot` (past its consistent point); fails with its
/// stderr as soon as it ended.
pub fn wait_streaming(db: &Psql, slot: &str, running: &mut Running) {
    let t = Instant::now();
    while one(db, &streaming_sql(slot)) != "t" {
        if running.0.try_wait().unwrap().is_some() {
            panic!("the consumer ended: {}", running.report());
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "slot {slot} never active: {}",
            running.report()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until no walsender holds the slot.
pub fn wait_free(db: &Psql, slot: &str) {
    let t = Instant::now();
    while one(
        db,
        &format!("SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}';"),
    ) == "t"
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "slot {slot} stays active"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn hex(db: &Psql, expr: &str) -> String {
    one(db, &format!("SELECT encode({expr}, 'hex');"))
}

/// Runs `openssl` with `args` in `dir` (Debian's openssl package: `cargo xtask test` installs
/// it), failing with its output.
pub fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`{ca}.crt`, `{ca}.key`) in `dir`.
pub fn ca(dir: &std::path::Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=rowid-cdc test {ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.crt"),
        ],
    );
}

/// `server.crt` / `server.key` in `dir` for `subject_alt_name` (`DNS:name`, `IP:address`),
/// signed by CA `ca` of [`ca`].
pub fn signed_certificate(dir: &std::path::Path, ca: &str, subject_alt_name: &str) {
    std::fs::write(
        dir.join("san.cnf"),
        format!("subjectAltName={subject_alt_name}\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN=rowid-cdc test server of {ca}"),
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            "-out",
            "server.crt",
        ],
    );
}

/// Drops slot `.1` of `.0`'s server when dropped (declared before the consumer, so it runs
/// after the consumer was killed): a test leaves no slot behind for the next to run out of.
pub struct DropSlot<'a>(pub &'a Psql, pub &'a str);

impl Drop for DropSlot<'_> {
    fn drop(&mut self) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            let dropped = self.0.run(&format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE slot_name = '{}' AND NOT active;
                 SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{}';",
                self.1, self.1
            ));
            if dropped.is_ok_and(|out| out.trim().ends_with('0')) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `ALTER SYSTEM <change>` in `db`'s cluster, in force at once (reloaded).
pub fn alter_system(db: &Psql, change: &str) -> Result<(), String> {
    db.run(&format!("ALTER SYSTEM {change};"))?;
    db.run("SELECT pg_catalog.pg_reload_conf();").map(|_| ())
}

/// Makes every later commit on `db`'s cluster wait for a synchronous standby that never comes
/// (`synchronous_standby_names = 'nobody'`), and returns only once that is in force. A reload
/// reaches the processes one by one: a session started right after `pg_reload_conf()` can fork
/// before the postmaster read the file, or commit before the checkpointer set the flag that
/// commits wait on, and then commits at once. So a probe commits (a temporary table dropped at
/// its commit: WAL and an xid, nothing any publication carries) until one is held; that one is
/// cancelled, which releases it committed, and the probe session ends without waiting again.
pub fn hold_commits(db: &Psql) {
    alter_system(db, "SET synchronous_standby_names = 'nobody'").unwrap();
    let t = Instant::now();
    let held = "FROM pg_catalog.pg_stat_activity \
                WHERE application_name = 'rowid-sync-probe' AND wait_event = 'SyncRep'";
    loop {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "synchronous_standby_names = 'nobody' never held a commit"
        );
        let mut probe = Command::new("psql")
            .args(db.args().split_whitespace())
            .args(["-X", "-q", "-c", "SET synchronous_commit = on"])
            .args([
                "-c",
                "CREATE TEMPORARY TABLE rowid_sync_probe () ON COMMIT DROP",
            ])
            // The session's exit, past the cancelled wait, commits nothing that could wait.
            .args(["-c", "SET synchronous_commit = local"])
            .env("PGAPPNAME", "rowid-sync-probe")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let asked = Instant::now();
        loop {
            if probe.try_wait().unwrap().is_some() {
                // Committed without waiting: the reload is not everywhere yet.
                break;
            }
            if one(db, &format!("SELECT count(*) {held};")) == "1" {
                one(
                    db,
                    &format!("SELECT pg_catalog.pg_cancel_backend(pid) {held};"),
                );
                probe.wait().unwrap();
                return;
            }
            if asked.elapsed() > Duration::from_secs(10) {
                let _ = probe.kill();
                panic!("a probe commit neither ended nor waited for the standby");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to a minute) until `sql` on `db` prints `expected`, while `running` runs: fails
/// with `what` and how `running` ended as soon as it ended.
pub fn wait_for(db: &Psql, sql: &str, expected: &str, running: &mut Running, what: &str) {
    let t = Instant::now();
    while db.run(sql).map(|s| s.trim().to_string()).as_deref() != Ok(expected) {
        running.still_within(t, Duration::from_secs(60), what);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A test pause point of a consumer (`ROWID_CDC_TEST_PAUSE=POINT:FILE`, rowid-cdc's
/// `fault` module): the consumer waits at the point until the file exists, and removes it.
pub struct Gate(pub PathBuf);

impl Gate {
    /// The environment setting that makes a consumer wait at `point` for this gate.
    pub fn env(&self, point: &str) -> (String, String) {
        (
            "ROWID_CDC_TEST_PAUSE".to_string(),
            format!("{point}:{}", self.0.display()),
        )
    }

    /// Lets the consumer pass once, and waits until it did (it removed the file).
    pub fn pass(&self, running: &mut Running) {
        std::fs::write(&self.0, b"").unwrap();
        let t = Instant::now();
        while self.0.exists() {
            running.still_within(
                t,
                Duration::from_secs(60),
                "the paused consumer never passed",
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Lets the consumer pass every time from now on (a thread keeps the file there until
    /// the returned flag is set).
    pub fn open(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (file, flag) = (self.0.clone(), stop.clone());
        std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if !file.exists() {
                    let _ = std::fs::write(&file, b"");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        stop
    }
}
