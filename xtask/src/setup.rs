//! Installs what the checks need when it is missing, saying what it does. Everything here is
//! idempotent and skips work that is already done.

use crate::shell::{cmd, exec, succeeds};

/// Cross target for the big-endian run.
pub const BIG_ENDIAN_TARGET: &str = "s390x-unknown-linux-gnu";
/// Target without `std`, proving the codec's `no_std` claim.
pub const NO_STD_TARGET: &str = "thumbv7em-none-eabihf";

const S390X_PACKAGES: [&str; 3] = ["gcc-s390x-linux-gnu", "libc6-dev-s390x-cross", "qemu-user"];

/// Ensures rustfmt and clippy are installed.
pub fn components() -> Result<(), String> {
    for (probe, component) in [("fmt", "rustfmt"), ("clippy", "clippy")] {
        if !succeeds(cmd("cargo").args([probe, "--version"])) {
            println!("installing rustup component {component}");
            exec(cmd("rustup").args(["component", "add", component]))?;
        }
    }
    Ok(())
}

/// Ensures a rustup target is installed.
pub fn target(triple: &str) -> Result<(), String> {
    let out = cmd("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| format!("rustup is needed to add target {triple}: {e}"))?;
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == triple)
    {
        println!("installing rustup target {triple}");
        exec(cmd("rustup").args(["target", "add", triple]))?;
    }
    Ok(())
}

fn is_root() -> bool {
    cmd("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Installs Debian packages that are not installed yet (apt-get update first).
pub fn apt(packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            let out = cmd("dpkg-query").args(["-W", "-f=${Status}", p]).output();
            !out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("installing Debian packages: {}", missing.join(" "));
    let sudo = if is_root() { None } else { Some("sudo") };
    let apt_get = |args: &[&str]| {
        let mut c = cmd(sudo.unwrap_or("apt-get"));
        if sudo.is_some() {
            c.arg("apt-get");
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    exec(&mut apt_get(&["update", "-q"]))?;
    let mut install = apt_get(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(&missing);
    exec(&mut install)
}

/// Cross toolchain and emulator for the big-endian test run.
pub fn big_endian() -> Result<(), String> {
    apt(&S390X_PACKAGES)?;
    target(BIG_ENDIAN_TARGET)
}

/// `cargo-fuzz` and a nightly toolchain.
pub fn fuzzing() -> Result<(), String> {
    if !succeeds(cmd("cargo").args(["+nightly", "--version"])) {
        return Err(
            "fuzzing needs the nightly toolchain (`rustup toolchain install nightly`), which \
             this machine does not have"
                .into(),
        );
    }
    if !succeeds(cmd("cargo").args(["fuzz", "--version"])) {
        println!("installing cargo-fuzz");
        exec(cmd("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}

/// The cargo-pgrx version the extension is pinned to (`pgrx = "=0.18.1"`).
pub const PGRX_VERSION: &str = "0.18.1";
/// The system PostgreSQL the extension is built and tested against.
pub const PG15_CONFIG: &str = "/usr/lib/postgresql/15/bin/pg_config";

/// cargo-pgrx, the build dependencies of pgrx, and `cargo pgrx init` for the given
/// `(major, pg_config)` pairs (PostgreSQL 15 is always included).
pub fn pgrx(extra: &[(u32, std::path::PathBuf)]) -> Result<(), String> {
    apt(&[
        "postgresql-15",
        "postgresql-server-dev-15",
        "libclang-dev",
        "clang",
        "sudo",
    ])?;
    let installed = cmd("cargo")
        .args(["pgrx", "--version"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(PGRX_VERSION));
    if !installed {
        println!("installing cargo-pgrx {PGRX_VERSION} (takes about 6 minutes)");
        exec(cmd("cargo").args([
            "install",
            "cargo-pgrx",
            "--version",
            PGRX_VERSION,
            "--locked",
        ]))?;
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let config = std::path::Path::new(&home)
        .join(".pgrx")
        .join("config.toml");
    let mut current = std::fs::read_to_string(&config).unwrap_or_default();
    // pgrx's build script may ask any configured pg_config for its version, so an entry left
    // by a deleted checkout can break every build; `cargo pgrx init` keeps such entries.
    let kept = without_missing_pg_configs(&current, |p| std::path::Path::new(p).exists());
    if kept != current {
        println!(
            "removing pg_config entries whose files no longer exist from {}",
            config.display()
        );
        std::fs::write(&config, &kept)
            .map_err(|e| format!("cannot rewrite {}: {e}", config.display()))?;
        current = kept;
    }
    let mut wanted = vec![(15, std::path::PathBuf::from(PG15_CONFIG))];
    wanted.extend(extra.iter().filter(|(m, _)| *m != 15).cloned());
    if wanted
        .iter()
        .any(|(_, p)| !current.contains(&*p.to_string_lossy()))
    {
        println!(
            "cargo pgrx init for PostgreSQL {:?} (downloads nothing)",
            wanted.iter().map(|w| w.0).collect::<Vec<_>>()
        );
        let mut init = cmd("cargo");
        init.args(["pgrx", "init"]);
        for (major, pg_config) in &wanted {
            init.arg(format!("--pg{major}")).arg(pg_config);
        }
        exec(&mut init)?;
    }
    Ok(())
}

/// A `~/.pgrx/config.toml` without the `pgNN = "/path/to/pg_config"` lines whose path
/// `exists` denies; every other line (other tables, `"download"` entries) is kept as written.
fn without_missing_pg_configs(config: &str, exists: impl Fn(&str) -> bool) -> String {
    config
        .split_inclusive('\n')
        .filter(|line| pg_config_path(line).is_none_or(&exists))
        .collect()
}

/// The path of a `pgNN = "/path/to/pg_config"` line.
fn pg_config_path(line: &str) -> Option<&str> {
    let (key, value) = line.split_once('=')?;
    let major = key.trim().strip_prefix("pg")?;
    if major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let path = value.trim().strip_prefix('"')?.strip_suffix('"')?;
    path.starts_with('/').then_some(path)
}

#[cfg(test)]
mod tests {
    use super::without_missing_pg_configs;

    #[test]
    fn drops_only_the_pg_configs_that_no_longer_exist() {
        let config = "[configs]\n\
                      pg17 = \"/gone/target/pg-dist/17.11.0/bin/pg_config\"\n\
                      pg15 = \"/usr/lib/postgresql/15/bin/pg_config\"\n\
                      pg16 = \"download\"\n\
                      [other]\n\
                      note = \"/gone/but/not/a/pg_config/entry\"\n";
        let kept = without_missing_pg_configs(config, |p| !p.starts_with("/gone/"));
        assert_eq!(
            kept,
            "[configs]\n\
             pg15 = \"/usr/lib/postgresql/15/bin/pg_config\"\n\
             pg16 = \"download\"\n\
             [other]\n\
             note = \"/gone/but/not/a/pg_config/entry\"\n"
        );
        assert_eq!(without_missing_pg_configs(config, |_| true), config);
        assert_eq!(without_missing_pg_configs("", |_| false), "");
    }
}
