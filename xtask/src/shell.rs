//! Running commands: cargo through `$CARGO`, step banners, and captured test counts.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workspace root.
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// `cargo`, as the one that runs xtask.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// A plain command run from the workspace root.
pub fn cmd(program: &str) -> Command {
    let mut c = Command::new(program);
    c.current_dir(root());
    c
}

/// Prints a step banner.
pub fn step(title: &str) {
    println!("\n==> {title}");
}

fn describe(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `c` with inherited output; an error names the command.
pub fn exec(c: &mut Command) -> Result<(), String> {
    let started = Instant::now();
    let what = describe(c);
    println!("$ {what}");
    let status = c
        .status()
        .map_err(|e| format!("cannot start `{what}`: {e}"))?;
    println!("   ({:.1} s)", started.elapsed().as_secs_f64());
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{what}` failed ({status})"))
    }
}

/// Seconds `c` takes to run to success, and its stderr (captured, not shown).
pub fn timed(c: &mut Command) -> Result<(f64, String), String> {
    let started = Instant::now();
    let out = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("{c:?} failed: {stderr}"));
    }
    Ok((secs, stderr))
}

/// True when `c` runs and exits 0 (output discarded).
pub fn succeeds(c: &mut Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Passed/failed counts read from libtest's `test result:` lines.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Tests passed.
    pub passed: u64,
    /// Tests failed.
    pub failed: u64,
}

impl Counts {
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next()) {
                match (n.parse::<u64>(), what) {
                    (Ok(n), "passed") => self.passed += n,
                    (Ok(n), "failed") => self.failed += n,
                    _ => {}
                }
            }
        }
    }

    /// Adds another run's counts.
    pub fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
    }
}

/// Runs a test command, echoing its stdout while counting libtest results.
pub fn run_tests(c: &mut Command) -> Result<Counts, String> {
    let started = Instant::now();
    let what = describe(c);
    println!("$ {what}");
    let mut child = c
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{what}`: {e}"))?;
    let mut counts = Counts::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            counts.add_line(&line);
        }
    }
    let status = child.wait().map_err(|e| format!("`{what}`: {e}"))?;
    println!("   ({:.1} s)", started.elapsed().as_secs_f64());
    if status.success() {
        Ok(counts)
    } else {
        Err(format!("`{what}` failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn reads_libtest_summary() {
        let mut c = Counts::default();
        c.add_line("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.04s");
        c.add_line("test result: FAILED. 3 passed; 2 failed; 0 ignored");
        c.add_line("running 12 tests");
        assert_eq!((c.passed, c.failed), (15, 2));
    }
}
