//! Running `rowid-cdc` in the benchmarks (sections 5, 5a and 9): its build, its command line
//! and the peak RSS its progress line reports.

use std::path::Path;

use crate::shell::{cargo, exec, root};

/// Builds `rowid-cdc` (a release build, a debug one for the smoke test) and returns its path.
pub(crate) fn rowid_cdc_binary(quick: bool) -> Result<std::path::PathBuf, String> {
    rowid_cdc_build(quick, None)
}

/// Builds `rowid-cdc`, or its `example` when given, in the profile [`rowid_cdc_binary`] uses,
/// and returns the executable's path.
pub(crate) fn rowid_cdc_build(
    quick: bool,
    example: Option<&str>,
) -> Result<std::path::PathBuf, String> {
    let mut build = cargo();
    build.args(["build", "-p", "rowid-cdc"]);
    if let Some(example) = example {
        build.args(["--example", example]);
    }
    if !quick {
        build.arg("--release");
    }
    exec(&mut build)?;
    let dir = root()
        .join("target")
        .join(if quick { "debug" } else { "release" });
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
