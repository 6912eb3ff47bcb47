//! `cargo xtask`: the project's commands.
//!
//! ```text
//! cargo xtask test              every check CI runs (installs what is missing)
//! cargo xtask vectors [--check] regenerate vectors/, or fail if it is stale
//! cargo xtask fuzz [--seconds N] fuzz the strict decoder (nightly + cargo-fuzz)
//! cargo xtask demo              show identities computed by the codec
//! cargo xtask bench [--quick]   benchmarks with their baselines (report in target/bench)
//! ```

mod bench;
mod demo;
mod fuzz;
mod pg;
mod setup;
mod shell;
mod test;
mod vectors;

use std::process::ExitCode;

const USAGE: &str =
    "usage: cargo xtask <test | vectors [--check] | fuzz [--seconds N] | demo | bench [--quick]>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test"] => test::run(),
        ["vectors"] => vectors::write(),
        ["vectors", "--check"] => vectors::check(),
        ["fuzz"] => fuzz::run(fuzz::DEFAULT_SECONDS),
        ["fuzz", "--seconds", n] => match n.parse() {
            Ok(secs) => fuzz::run(secs),
            Err(_) => Err(format!("--seconds needs a number, got {n:?}")),
        },
        ["demo"] => demo::run(),
        ["bench"] => bench::run(false),
        ["bench", "--quick"] => bench::run(true),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: error: {message}");
            ExitCode::FAILURE
        }
    }
}
