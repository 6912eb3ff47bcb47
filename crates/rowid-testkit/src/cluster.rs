//! A throwaway PostgreSQL cluster on a unix socket: `initdb` into a folder of the caller's,
//! start with logical decoding on, stop when dropped. As root, the cluster belongs to the
//! `postgres` user (initdb refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::psql::Psql;

/// A running cluster.
pub struct Cluster {
    bindir: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    port: u16,
    as_postgres: bool,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn run(c: &mut Command) -> Result<(), String> {
    let what = format!("{c:?}");
    let out = c
        .output()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Cluster {
    /// A fresh cluster under `base` (emptied first) made by the binaries in `bindir`, with
    /// the C.UTF-8 locale, UTF8 encoding and trust authentication, listening on `port` on a
    /// socket in `base/sock`.
    pub fn start(bindir: &Path, base: &Path, port: u16) -> Result<Cluster, String> {
        let _ = std::fs::remove_dir_all(base);
        let (data, socket) = (base.join("data"), base.join("sock"));
        std::fs::create_dir_all(&socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(base))?;
        }
        let cluster = Cluster {
            bindir: bindir.to_path_buf(),
            data,
            socket,
            port,
            as_postgres,
        };
        run(&mut cluster.tool(
            "initdb",
            &[
                "-D",
                &cluster.data.to_string_lossy(),
                "--locale=C.UTF-8",
                "--encoding=UTF8",
                "-A",
                "trust",
                "-U",
                "postgres",
            ],
        ))?;
        cluster.pg_ctl("start", "")?;
        Ok(cluster)
    }

    /// `pg_ctl start|restart` with the cluster's fixed options plus `extra` server options
    /// (`-c shared_buffers=4MB ...`).
    fn pg_ctl(&self, action: &str, extra: &str) -> Result<(), String> {
        self.pg_ctl_with_env(action, extra, &[])
    }

    /// [`Cluster::pg_ctl`] with `env` in the server's environment (which `runuser` keeps).
    fn pg_ctl_with_env(
        &self,
        action: &str,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Result<(), String> {
        let log = self.data.with_file_name("server.log");
        let opts = format!(
            "-p {} -k {} -c listen_addresses='' -c fsync=off -c wal_level=logical \
             -c max_replication_slots=10 -c logical_decoding_work_mem=64kB {extra}",
            self.port,
            self.socket.display()
        );
        let mut command = self.tool(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-o",
                &opts,
                action,
            ],
        );
        command.envs(env.iter().copied());
        run(&mut command)
    }

    /// Moves the cluster's next transaction id to `next_xid` (epoch 0), as `pg_resetwal -x`
    /// does: every database is frozen first (their rows stay visible), the server stopped,
    /// the commit log segment of `next_xid` created, and the server started again. For
    /// tests that cross the 32-bit xid wraparound without consuming 2^32 transactions.
    pub fn move_next_xid(&self, next_xid: u32) -> Result<(), String> {
        let psql = self.psql();
        let databases = psql.run("SELECT datname FROM pg_database WHERE datallowconn")?;
        for db in databases.lines().map(str::trim).filter(|d| !d.is_empty()) {
            psql.with_db(db).run("VACUUM FREEZE")?;
        }
        let data = self.data.to_string_lossy().into_owned();
        run(&mut self.tool("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]))?;
        run(&mut self.tool("pg_resetwal", &["-x", &next_xid.to_string(), "-D", &data]))?;
        // pg_xact: 2 bits a transaction, 32 pages of 8 kB a segment (1048576 transactions),
        // named by the segment number in four hex digits; a new segment is zeroes.
        let segment = self
            .data
            .join("pg_xact")
            .join(format!("{:04X}", next_xid / 1_048_576));
        if !segment.exists() {
            std::fs::write(&segment, vec![0u8; 32 * 8192])
                .map_err(|e| format!("{}: {e}", segment.display()))?;
            if self.as_postgres {
                run(Command::new("chown").arg("postgres:postgres").arg(&segment))?;
            }
        }
        self.pg_ctl("start", "")
    }

    /// Restarts the server with `extra` options (shared buffers start empty).
    pub fn restart(&self, extra: &str) -> Result<(), String> {
        self.pg_ctl("restart", extra)
    }

    /// [`Cluster::restart`] with `env` added to the server's environment (every backend
    /// inherits it): a test of what the server does with, say, `RUST_BACKTRACE` set.
    pub fn restart_with_env(&self, extra: &str, env: &[(&str, &str)]) -> Result<(), String> {
        self.pg_ctl_with_env("restart", extra, env)
    }

    /// Stops the server (`pg_ctl stop -m fast`, waiting at most 60 s); how long it took.
    pub fn stop_fast(&self) -> Result<std::time::Duration, String> {
        let data = self.data.to_string_lossy().into_owned();
        let started = std::time::Instant::now();
        run(&mut self.tool(
            "pg_ctl",
            &["-D", &data, "-m", "fast", "-w", "-t", "60", "stop"],
        ))?;
        Ok(started.elapsed())
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.data.with_file_name("server.log")
    }

    fn tool(&self, program: &str, args: &[&str]) -> Command {
        let path = self.bindir.join(program);
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        c.args(args);
        c
    }

    /// psql connection arguments for this cluster.
    pub fn psql_args(&self) -> String {
        format!(
            "-h {} -p {} -U postgres -d postgres",
            self.socket.display(),
            self.port
        )
    }

    /// A libpq connection string for database `dbname` on this cluster (as `postgres`).
    pub fn dsn(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={dbname}",
            self.socket.display(),
            self.port
        )
    }

    /// This cluster's own psql.
    pub fn psql(&self) -> Psql {
        Psql::new(self.bindir.join("psql"), &self.psql_args())
    }

    /// The server binaries' directory (put first on `PATH` so `psql` matches the server).
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The data directory (`pg_hba.conf`, certificates a test writes there).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// Writes `name` into the data directory with `contents`, owned by the server's user and
    /// readable by it only (as a private key must be).
    pub fn write_file(&self, name: &str, contents: &[u8]) -> Result<(), String> {
        let path = self.data.join(name);
        std::fs::write(&path, contents).map_err(|e| format!("{}: {e}", path.display()))?;
        if self.as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(&path))?;
        }
        run(Command::new("chmod").arg("0600").arg(&path))
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Cluster {
    /// Stops the server and deletes its folder (data, socket, log): for a run that passed,
    /// so the next major's cluster does not add its gigabytes to this one's.
    pub fn remove(self) -> Result<(), String> {
        let base = self
            .data
            .parent()
            .map(Path::to_path_buf)
            .ok_or("a cluster's data folder has a parent")?;
        drop(self);
        std::fs::remove_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data.to_string_lossy().into_owned();
        let _ = self
            .tool("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])
            .status();
    }
}

/// The directory of the PostgreSQL server binaries first on `PATH` (`cargo xtask test` puts
/// the cluster's there), for a test that starts a cluster of its own.
pub fn server_bindir() -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "command -v pg_ctl"])
        .output()
        .unwrap();
    let pg_ctl = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!pg_ctl.is_empty(), "pg_ctl is not on PATH");
    Path::new(&pg_ctl).parent().unwrap().to_path_buf()
}
