//! A psql runner for the tests that need a real server (`cargo xtask test` starts the
//! server and passes connection arguments in `ROWID_ORACLE_PSQL_ARGS`).

use std::process::Command;

/// Runs `script` with `psql -X -q -A -t -v ON_ERROR_STOP=1` and returns its output, or an
/// error with psql's stderr.
pub fn run(script: &str) -> Result<String, String> {
    let args = std::env::var("ROWID_ORACLE_PSQL_ARGS").map_err(|_| {
        "ROWID_ORACLE_PSQL_ARGS is not set: run through `cargo xtask test`".to_string()
    })?;
    let file = std::env::temp_dir().join(format!(
        "rowid-psql-{}-{:?}.sql",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&file, script).map_err(|e| format!("{}: {e}", file.display()))?;
    let out = Command::new("psql")
        .args(args.split_whitespace())
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&file)
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    let _ = std::fs::remove_file(&file);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
