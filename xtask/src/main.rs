//! `cargo xtask`: the project's commands.
//!
//! ```text
//! cargo xtask test               every check CI runs (installs what is missing)
//! cargo xtask demo               a throwaway PostgreSQL with the extension, showing identities
//! cargo xtask vectors [--check]  regenerate vectors/, or fail if it is stale
//! cargo xtask sql [--check]      regenerate the extension's install script, or fail if stale
//! cargo xtask package [--debug]  an installable tree of the extension (target/package)
//! cargo xtask fuzz [--seconds N] fuzz the identity and pgoutput decoders (nightly)
//! cargo xtask bench [--quick]    benchmarks with their baselines (report in target/bench);
//!   [--only PART]                 one part: codec, per-row, physical, probe, capture, replica,
//!                                 locality, nats,
//!                                 wal, or sql (per-row, physical and probe)
//! ```

mod bench;
mod bench_cdc;
mod bench_ddl;
mod bench_locality;
mod bench_nats;
mod bench_replica;
mod bench_scheduler;
mod bench_stream;
mod bench_window;
mod demo;
mod fuzz;
mod package;
mod pg;
mod release;
mod setup;
mod shell;
mod sql;
mod test;
mod vectors;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <test | demo | vectors [--check] | sql [--check] | \
                     package [--debug] | fuzz [--seconds N] | \
                     bench [--quick] [--only PART]>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test"] => test::run(),
        ["vectors"] => vectors::write(),
        ["vectors", "--check"] => vectors::check(),
        ["sql"] => sql::write(),
        ["sql", "--check"] => sql::check(),
        ["package"] => package::run(false).map(drop),
        ["package", "--debug"] => package::run(true).map(drop),
        ["fuzz"] => fuzz::run(fuzz::DEFAULT_SECONDS),
        ["fuzz", "--seconds", n] => match n.parse() {
            Ok(secs) => fuzz::run(secs),
            Err(_) => Err(format!("--seconds needs a number, got {n:?}")),
        },
        ["demo"] => demo::run(),
        ["bench"] => bench::run(false, None),
        ["bench", "--quick"] => bench::run(true, None),
        ["bench", "--only", part] => bench::run(false, Some(part)),
        ["bench", "--quick", "--only", part] => bench::run(true, Some(part)),
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
