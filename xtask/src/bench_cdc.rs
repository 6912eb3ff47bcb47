//! Running `rowid-cdc` in the benchmarks (sections 5, 5a and 9): its build, its command line
//! and the peak RSS its progress line reports.

use std::path::Path;

use crate::shell::{cargo, exec, root};

/// Which build of `rowid-cdc` a benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CdcBuild {
    /// `cargo build --release`: the binary users build, features as a build resolves them
    /// (the measured runs).
    Release,
    /// The binary `cargo test --release` at the workspace root built (the smoke test inside
    /// `cargo xtask test`, which has just run that command): the same sources, built with
    /// the features the test targets' dev-dependencies add. `cargo build` would resolve
    /// fewer features and compile rowid-cdc and its dependencies again (about 85 s on a
    /// 2-core machine) for a run that judges no figure.
    AsTested,
}

/// Builds `rowid-cdc` and returns its path.
pub(crate) fn rowid_cdc_binary(build: CdcBuild) -> Result<std::path::PathBuf, String> {
    rowid_cdc_build(None, build)
}

/// Builds `rowid-cdc`, or its `example` when given, as a release build of the default
/// workspace members and returns the executable's path.
///
/// Not `-p rowid-cdc`, and not a debug build for the smoke test: `cargo xtask test` has built
/// the workspace in release (its tests step, `cargo test --release`) when it gets here, and
/// another selection or profile compiles rowid-cdc and its dependencies again (minutes on a
/// 2-core CI machine; the demo's build as well). [`CdcBuild::AsTested`] runs that same
/// command with `--no-run`, which builds the binary and the examples (a no-op after it).
pub(crate) fn rowid_cdc_build(
    example: Option<&str>,
    build: CdcBuild,
) -> Result<std::path::PathBuf, String> {
    let mut command = cargo();
    match build {
        CdcBuild::Release => {
            command.args(["build", "--release"]);
            match example {
                Some(example) => command.args(["--example", example]),
                None => command.args(["--bin", "rowid-cdc"]),
            };
        }
        CdcBuild::AsTested => {
            command.args(["test", "--release", "--no-run"]);
        }
    }
    exec(&mut command)?;
    let dir = root().join("target").join("release");
    Ok(match example {
        Some(example) => dir.join("examples").join(example),
        None => dir.join("rowid-cdc"),
    })
}

/// `rowid-cdc` at `binary` following `slot` of publication `p` of `dsn` into `sink`, its state
/// file in `dir`, with `extra` arguments.
pub(crate) fn cdc_command(
    binary: &Path,
    dsn: &str,
    dir: &Path,
    slot: &str,
    sink: &str,
    extra: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(binary);
    c.args([
        "--dsn",
        dsn,
        "--slot",
        slot,
        "--publication",
        "p",
        "--sink",
        sink,
    ])
    .arg("--state")
    .arg(dir.join(format!("{slot}.state")))
    .args(extra);
    c
}

/// The peak RSS in MB that rowid-cdc's last progress line gives in `stderr`, or `-`.
pub(crate) fn rss(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.split("peak RSS ").nth(1))
        .and_then(|v| v.trim_end_matches(" KiB").trim().parse::<f64>().ok())
        .map_or("-".to_string(), |k| format!("{:.1}", k / 1024.0))
}
