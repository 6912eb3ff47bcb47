//! A throwaway PostgreSQL cluster on a unix socket under `target/`, for the tests that judge
//! the codec against a real server. Stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::setup;
use crate::shell::{cmd, exec, root};

/// Debian package of the system PostgreSQL (preinstalled on this machine kind).
const SERVER_PACKAGE: &str = "postgresql-15";

/// A running cluster.
pub struct Cluster {
    bindir: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    port: u16,
    as_postgres: bool,
}

fn is_root() -> bool {
    cmd("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The system server's binaries (`pg_config --bindir`), installing the server if missing.
fn system_bindir() -> Result<PathBuf, String> {
    setup::apt(&[SERVER_PACKAGE, "postgresql-client-15"])?;
    let out = Command::new("/usr/lib/postgresql/15/bin/pg_config")
        .arg("--bindir")
        .output()
        .map_err(|e| format!("pg_config: {e}"))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

impl Cluster {
    /// initdb + start, with the C.UTF-8 locale and trust authentication.
    pub fn start(name: &str, port: u16) -> Result<Cluster, String> {
        let bindir = system_bindir()?;
        let base = root().join("target").join(name);
        let _ = std::fs::remove_dir_all(&base);
        let (data, socket) = (base.join("data"), base.join("sock"));
        std::fs::create_dir_all(&socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        let as_postgres = is_root();
        if as_postgres {
            // initdb refuses to run as root; the cluster belongs to the postgres user.
            exec(cmd("chown").args(["-R", "postgres:postgres"]).arg(&base))?;
        }
        let cluster = Cluster {
            bindir,
            data,
            socket,
            port,
            as_postgres,
        };
        exec(&mut cluster.tool(
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
        let log = base.join("server.log");
        let opts = format!(
            "-p {port} -k {} -c listen_addresses='' -c fsync=off",
            cluster.socket.display()
        );
        exec(&mut cluster.tool(
            "pg_ctl",
            &[
                "-D",
                &cluster.data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-o",
                &opts,
                "start",
            ],
        ))?;
        Ok(cluster)
    }

    fn tool(&self, program: &str, args: &[&str]) -> Command {
        let path = self.bindir.join(program);
        let mut c = if self.as_postgres {
            let mut c = cmd("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            cmd(&path.to_string_lossy())
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

    /// The server binaries' directory (put first on PATH so `psql` matches the server).
    pub fn bindir(&self) -> &Path {
        &self.bindir
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
