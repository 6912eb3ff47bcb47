//! The NATS JetStream sink against a live server and a `nats-server` with JetStream that the
//! test starts: a workload of inserts, key-changing updates and deletes runs while the
//! consumer is SIGKILLed again and again and restarted; the stream then holds every change
//! exactly once, in commit order, equal (transaction, operation, identities) to what an audit
//! trigger recorded with `encode_row_id_v2`, each on its table's subject with its headers.
//! A restart that finds an unfinished transaction sends again exactly what the stream lacks of
//! it, past the stream's de-duplication window too, and the same run without message ids
//! shows the duplicates the check would see; a change the stream refuses leaves no commit
//! marker; a stream behind the state file, or whose subjects do not hold the sink's, is
//! refused by name. A stream with limits or a retention that removes messages is reported by name,
//! and one that refuses a message (full, `discard new`) stops the run, naming it. A
//! credentials file authenticates under an operator; a stranger's is refused.
//!
//! Needs a server with `wal_level = logical` and the extension, and `nats-server` on PATH:
//! run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod nats_kit;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::{Config, DiscardPolicy, RetentionPolicy};
use common::{
    Cdc, Dir, DropSlot, Running, ca, database, signed_certificate, wait_free, wait_streaming,
};
use nats_kit::{
    NatsServer, assert_equals_audit, audit, audited_table, create_stream, create_stream_with,
    creds, purge_stream, read_stream, update_stream, wait_changes, workload,
};
use rowid_testkit::psql::Psql;

/// A fresh database `rowid_cdc_<name>` with identity messages on, table `table` (`columns`)
/// published by publication `<name>`, and a scratch directory `<name>`.
fn source(name: &str, table: &str, columns: &str) -> (Psql, Dir) {
    let db = database(&format!("rowid_cdc_{name}"), name);
    db.run(&format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE {table} ({columns});
         CREATE PUBLICATION {name} FOR TABLE {table};"
    ))
    .unwrap();
    (db, Dir::new(name))
}

/// rowid-cdc for `source(name, ..)`: slot and publication `name`.
fn cdc<'a>(name: &'a str, db: &Psql, dir: &'a Dir) -> Cdc<'a> {
    Cdc {
        dsn: db.dsn(),
        slot: name,
        publication: name,
        dir,
    }
}

/// The tests share the server's WAL and the machine's ports: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Exactly once, in commit order, equal to the audit: a workload with the consumer killed 5
/// times.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn every_change_reaches_the_stream_exactly_once_through_kills() {
    let _serial = serial();
    let nats = NatsServer::start("once");
    let db = database("rowid_cdc_nats", "nats_once");
    audited_table(&db, "nats_once");
    let dir = Dir::new("nats-once");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "nats_once",
        publication: "nats_once",
        dir: &dir,
    };
    let _drop = DropSlot(&db, "nats_once");
    let sink = format!("nats:{}", nats.url);
    let args = ["--nats-stream", "ONCE", "--nats-subject-prefix", "cdc.test"];
    let spawn = |extra: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(extra);
        Running(cdc.command_into(&sink, &all).spawn().unwrap())
    };
    let mut running = spawn(&["--create-slot"]);
    wait_streaming(&db, "nats_once", &mut running);
    // The workload from another thread while the consumer is killed and restarted.
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || db.run(&workload(3000)).unwrap())
    };
    for kill in 0..5 {
        std::thread::sleep(Duration::from_millis(300 + 170 * kill));
        let _ = running.0.kill();
        let _ = running.0.wait();
        wait_free(&db, "nats_once");
        running = spawn(&[]);
        wait_streaming(&db, "nats_once", &mut running);
    }
    writer.join().unwrap();
    let audit = audit(&db);
    assert!(audit.len() > 7000, "{} audited changes", audit.len());
    let changes = wait_changes(
        &nats.url,
        "ONCE",
        "cdc.test",
        &audit,
        Duration::from_secs(120),
        &mut running,
    );
    assert_equals_audit(&changes, &audit);
    // Subjects and headers: the table's subject; relation, operation, commit LSN, identity,
    // and a message id of slot, commit LSN and sequence.
    for m in &changes {
        assert_eq!(m.subject, "cdc.test.rowid_cdc_nats.public.nk");
        let h = |k: &str| m.header(k);
        assert_eq!(h("Rowid-Relation"), "public.nk");
        assert_eq!(h("Rowid-Op"), m.body["op"].as_str().unwrap());
        assert_eq!(
            h("Rowid-Commit-Lsn"),
            m.body["commit_lsn"].as_str().unwrap()
        );
        let identity = match m.body["op"].as_str().unwrap() {
            "delete" => &m.body["old_id"],
            _ => &m.body["new_id"],
        };
        assert_eq!(h("Rowid-Identity"), identity.as_str().unwrap());
        assert!(
            h("Nats-Msg-Id").starts_with("nats_once:"),
            "{:?}",
            m.headers
        );
    }
    drop(running);
}

/// A stream whose subjects do not hold the prefix's is refused by name.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_stream_of_other_subjects_is_refused() {
    let _serial = serial();
    let nats = NatsServer::start("refusals");
    let (db, dir) = source("nats_other", "g", "id int8 PRIMARY KEY");
    let cdc = cdc("nats_other", &db, &dir);
    let _drop = DropSlot(&db, "nats_other");
    create_stream(
        &nats.url,
        "OTHER",
        &["elsewhere.>"],
        Duration::from_secs(120),
        1,
    );
    let sink = format!("nats:{}", nats.url);
    let out = cdc
        .command_into(&sink, &["--nats-stream", "OTHER", "--create-slot"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("NATS stream OTHER holds subjects") && err.contains("rowid_cdc.>"),
        "{err}"
    );
}

/// The changes of stream `name` (not the markers), by message id: how many times each is
/// there.
fn change_ids(url: &str, name: &str) -> std::collections::BTreeMap<String, usize> {
    let mut ids = std::collections::BTreeMap::new();
    for m in read_stream(url, name)
        .iter()
        .filter(|m| !m.subject.contains("._slot."))
    {
        *ids.entry(format!("{}#{}", m.body["new_id"], m.body["commit_lsn"]))
            .or_default() += 1;
    }
    ids
}

/// Items 16 and 20: killed once every change of a transaction was acknowledged and before its
/// commit marker, then started again after the stream's de-duplication window (1 s) has
/// passed, whatever the clocks say: the changes the stream holds are read back by their ids
/// and not published again, so each is there once (before: refused as older than half the
/// window, by a comparison of the server's clock with the local one made only at start).
/// The same run without message ids (`ROWID_CDC_TEST_NATS_NO_IDS`) leaves every change of that
/// transaction twice: the check above sees duplicates when they are there.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn an_unfinished_transaction_is_sent_again_exactly_past_the_window() {
    let _serial = serial();
    let nats = NatsServer::start("unfinished");
    for (ids, stream) in [(true, "GAP"), (false, "NOIDS")] {
        let name = format!("nats_gap_{}", stream.to_lowercase());
        let (db, dir) = source(&name, "g", "id int8 PRIMARY KEY");
        let cdc = cdc(&name, &db, &dir);
        let _drop = DropSlot(&db, &name);
        let prefix = stream.to_lowercase();
        let subjects = format!("{prefix}.>");
        create_stream(&nats.url, stream, &[&subjects], Duration::from_secs(1), 1);
        let sink = format!("nats:{}", nats.url);
        let spawn = |extra: &[&str], crash: bool| {
            let mut all = vec!["--nats-stream", stream, "--nats-subject-prefix", &prefix];
            all.extend_from_slice(extra);
            let mut c = cdc.command_into(&sink, &all);
            if crash {
                c.env("ROWID_CDC_TEST_CRASH", "before-nats-commit-marker");
            }
            if !ids {
                c.env("ROWID_CDC_TEST_NATS_NO_IDS", "1");
            }
            Running(c.spawn().unwrap())
        };
        let mut running = spawn(&["--create-slot"], true);
        wait_streaming(&db, &name, &mut running);
        db.run("INSERT INTO g SELECT generate_series(1, 50);")
            .unwrap();
        let (ok, err) = running.finish(Duration::from_secs(30));
        assert!(
            !ok && err.contains("test crash at before-nats-commit-marker"),
            "{err}"
        );
        assert_eq!(
            change_ids(&nats.url, stream).len(),
            50,
            "every change, before its marker"
        );
        // Past the de-duplication window.
        std::thread::sleep(Duration::from_millis(2500));
        let mut running = spawn(&[], false);
        wait_streaming(&db, &name, &mut running);
        db.run("INSERT INTO g VALUES (1000);").unwrap();
        let t = Instant::now();
        while change_ids(&nats.url, stream).len() < 51 {
            running.still_within(t, Duration::from_secs(30), "the next transaction");
            std::thread::sleep(Duration::from_millis(50));
        }
        running.interrupt();
        let counts = change_ids(&nats.url, stream);
        let twice = counts.values().filter(|n| **n > 1).count();
        if ids {
            assert_eq!(twice, 0, "each change once: {counts:?}");
        } else {
            assert_eq!(twice, 50, "without ids the resend doubles them: {counts:?}");
        }
    }
}

/// Item 3: a change the stream refuses (larger than its `max_msg_size`) must not be followed
/// by the transaction's commit marker: a restart trusts the marker and skips the transaction.
/// Once the stream takes it (its limit raised), the restart delivers the whole transaction.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_refused_change_leaves_no_commit_marker() {
    let _serial = serial();
    let nats = NatsServer::start("refused");
    let (db, dir) = source("nats_refused", "r", "id int8 PRIMARY KEY, t text");
    let cdc = cdc("nats_refused", &db, &dir);
    let _drop = DropSlot(&db, "nats_refused");
    let small = |limit: i32| Config {
        name: "SMALL".into(),
        subjects: vec!["rowid_cdc.>".into()],
        max_message_size: limit,
        ..Default::default()
    };
    create_stream_with(&nats.url, small(1024));
    let sink = format!("nats:{}", nats.url);
    let args = ["--nats-stream", "SMALL"];
    let mut first = args.to_vec();
    first.push("--create-slot");
    let mut running = Running(cdc.command_into(&sink, &first).spawn().unwrap());
    wait_streaming(&db, "nats_refused", &mut running);
    db.run("BEGIN; INSERT INTO r VALUES (1, 'small'); INSERT INTO r VALUES (2, repeat('x', 4000)); COMMIT;")
        .unwrap();
    let (ok, err) = running.finish(Duration::from_secs(30));
    assert!(
        !ok && err.contains("NATS stream SMALL refused a message"),
        "{err}"
    );
    let markers: Vec<String> = read_stream(&nats.url, "SMALL")
        .iter()
        .filter(|m| m.subject.contains("._slot."))
        .map(|m| m.body["marker"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        markers,
        ["open"],
        "no commit marker for a transaction the stream lacks"
    );
    update_stream(&nats.url, small(1 << 20));
    let mut running = Running(cdc.command_into(&sink, &args).spawn().unwrap());
    wait_streaming(&db, "nats_refused", &mut running);
    db.run("INSERT INTO r VALUES (3, 'after');").unwrap();
    let t = Instant::now();
    while change_ids(&nats.url, "SMALL").len() < 3 {
        running.still_within(
            t,
            Duration::from_secs(30),
            "the refused transaction and the next",
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    running.interrupt();
    let counts = change_ids(&nats.url, "SMALL");
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
}

/// Item 5: a stream that lost what the state file says it made durable (purged here; deleted
/// and created again, or an R1 server that lost acknowledged writes, look the same) is
/// refused at restart, naming the stream, instead of resuming past the gap.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_stream_behind_the_state_file_is_refused() {
    let _serial = serial();
    let nats = NatsServer::start("behind");
    let (db, dir) = source("nats_behind", "b", "id int8 PRIMARY KEY");
    let cdc = cdc("nats_behind", &db, &dir);
    let _drop = DropSlot(&db, "nats_behind");
    let sink = format!("nats:{}", nats.url);
    let args = ["--nats-stream", "BEHIND"];
    let mut first = args.to_vec();
    first.push("--create-slot");
    let mut running = Running(cdc.command_into(&sink, &first).spawn().unwrap());
    wait_streaming(&db, "nats_behind", &mut running);
    db.run("INSERT INTO b VALUES (1);").unwrap();
    let t = Instant::now();
    while change_ids(&nats.url, "BEHIND").is_empty() {
        running.still_within(t, Duration::from_secs(30), "the first change");
        std::thread::sleep(Duration::from_millis(50));
    }
    running.interrupt();
    purge_stream(&nats.url, "BEHIND");
    let out = cdc.run_into(&sink, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("NATS stream BEHIND holds changes through commit none")
            && err.contains("the state file says it had made durable"),
        "{err}"
    );
}

/// Credentials from the environment (user and password, token) or the URL, and never in what
/// the consumer prints; refused credentials stop it at once, naming the servers.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn credentials_come_from_the_environment_and_never_show() {
    let _serial = serial();
    let password = "pw-7f3a9c-secret";
    let token = "tok-51be0d-secret";
    let with_user = NatsServer::start_with("user", &["--user", "cdc", "--pass", password]);
    let with_token = NatsServer::start_with("token", &["--auth", token]);
    let (db, dir) = source("nats_auth", "a", "id int8 PRIMARY KEY");
    let cdc = cdc("nats_auth", &db, &dir);
    let _drop = DropSlot(&db, "nats_auth");
    let port = |s: &NatsServer| s.url.rsplit(':').next().unwrap().to_string();
    let user_url = format!("nats://cdc:{password}@127.0.0.1:{}", port(&with_user));
    let token_url = format!("nats://{token}@127.0.0.1:{}", port(&with_token));
    // Refused: a wrong password, then no credentials at all; nothing of either in stderr.
    for (user, pass) in [("cdc", "wrong-pw-0c1d"), ("", "")] {
        let out = cdc
            .command_into(&format!("nats:{}", with_user.url), &["--create-slot"])
            .env("ROWID_CDC_NATS_USER", user)
            .env("ROWID_CDC_NATS_PASSWORD", pass)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("NATS {}", with_user.url)) && err.contains("authoriz"),
            "{err}"
        );
        assert!(
            !err.contains("wrong-pw") && !err.contains(password),
            "{err}"
        );
    }
    // One change through the consumer started with `env`, read back from `read_url`; nothing
    // of `secret` in what it printed.
    let one_change =
        |server: &NatsServer, env: &[(&str, &str)], read_url: &str, id: u32, secret: &str| {
            let mut command = cdc.command_into(&format!("nats:{}", server.url), &["--create-slot"]);
            command.envs(env.iter().copied());
            let mut running = Running(command.spawn().unwrap());
            wait_streaming(&db, "nats_auth", &mut running);
            db.run(&format!("INSERT INTO a VALUES ({id});")).unwrap();
            let t = Instant::now();
            while read_stream(read_url, "ROWID_CDC").len() < 3 {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "{}",
                    running.report()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let err = running.interrupt();
            assert!(!err.contains(secret), "{err}");
        };
    // User and password from the environment.
    one_change(
        &with_user,
        &[
            ("ROWID_CDC_NATS_USER", "cdc"),
            ("ROWID_CDC_NATS_PASSWORD", password),
        ],
        &user_url,
        1,
        password,
    );
    // A token from the environment, into the other server (a new slot and state).
    wait_free(&db, "nats_auth");
    db.run("SELECT pg_drop_replication_slot('nats_auth');")
        .unwrap();
    let _ = std::fs::remove_file(dir.file("cdc.state"));
    one_change(
        &with_token,
        &[("ROWID_CDC_NATS_TOKEN", token)],
        &token_url,
        2,
        token,
    );
    // The password in the URL works, with a warning that does not repeat it (a new slot and
    // state, into a stream of its own: the first server's stream is behind the state above).
    wait_free(&db, "nats_auth");
    db.run("SELECT pg_drop_replication_slot('nats_auth');")
        .unwrap();
    let _ = std::fs::remove_file(dir.file("cdc.state"));
    let out = cdc
        .command_into(
            &format!("nats:{user_url}"),
            &[
                "--create-slot",
                "--nats-stream",
                "URL",
                "--nats-subject-prefix",
                "url_cdc",
                "--stop-after",
                "1",
            ],
        )
        .spawn()
        .unwrap();
    let mut running = Running(out);
    wait_streaming(&db, "nats_auth", &mut running);
    let _ = db.run("INSERT INTO a VALUES (3);");
    let (_, err) = running.finish(Duration::from_secs(30));
    assert!(err.contains("a NATS URL carries user information"), "{err}");
    assert!(!err.contains(password), "{err}");
}

/// TLS to the servers: verified against `--nats-tls-ca`, refused (at once, not retried)
/// without it, since the server's certificate is not from a public authority.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension, nats-server and openssl: run through `cargo xtask test`"]
fn tls_is_verified_against_the_given_root() {
    let _serial = serial();
    let certs = Dir::new("nats-tls-certs");
    let d = &certs.0;
    ca(d, "ca");
    signed_certificate(d, "ca", "IP:127.0.0.1");
    let cert = d.join("server.crt").display().to_string();
    let key = d.join("server.key").display().to_string();
    let nats = NatsServer::start_with("tls", &["--tls", "--tlscert", &cert, "--tlskey", &key]);
    let url = nats.url.replace("nats://", "tls://");
    let (db, dir) = source("nats_tls", "s", "id int8 PRIMARY KEY");
    let cdc = cdc("nats_tls", &db, &dir);
    let _drop = DropSlot(&db, "nats_tls");
    let started = Instant::now();
    let out = cdc
        .command_into(&format!("nats:{url}"), &["--create-slot"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("NATS {url}")), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not retried: {err}"
    );
    let ca = d.join("ca.crt").display().to_string();
    let mut running = Running(
        cdc.command_into(
            &format!("nats:{url}"),
            &["--create-slot", "--nats-tls-ca", &ca, "--stop-after", "1"],
        )
        .spawn()
        .unwrap(),
    );
    wait_streaming(&db, "nats_tls", &mut running);
    db.run("INSERT INTO s VALUES (1);").unwrap();
    let (ok, err) = running.finish(Duration::from_secs(30));
    assert!(ok, "the change went through TLS: {err}");
}

/// A change larger than the servers take stops the run, naming the table and the limit (it is
/// not retried forever as if the connection were lost).
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_change_larger_than_the_servers_take_is_refused_by_name() {
    let _serial = serial();
    let config = Dir::new("nats-payload-config");
    let file = config.file("small.conf");
    std::fs::write(&file, "max_payload: 4096\n").unwrap();
    let nats = NatsServer::start_with("payload", &["-c", &file.display().to_string()]);
    let (db, dir) = source("nats_payload", "big", "id int8 PRIMARY KEY, body text");
    let cdc = cdc("nats_payload", &db, &dir);
    let _drop = DropSlot(&db, "nats_payload");
    let mut running = Running(
        cdc.command_into(&format!("nats:{}", nats.url), &["--create-slot"])
            .spawn()
            .unwrap(),
    );
    wait_streaming(&db, "nats_payload", &mut running);
    db.run("INSERT INTO big VALUES (1, repeat('x', 10000));")
        .unwrap();
    let (ok, err) = running.finish(Duration::from_secs(30));
    assert!(!ok, "{err}");
    assert!(
        err.contains("a change of public.big")
            && err.contains("more than the servers' max_payload (4096 bytes)"),
        "{err}"
    );
}

/// A stream whose limits or retention would lose messages is named on stderr at start; one
/// full under `discard new` refuses the next message, and the run stops there naming the
/// stream and the server's reason (it is not a lost connection to retry for ever), with the
/// slot not acknowledged past what the stream holds.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_stream_that_would_lose_messages_is_named_and_a_full_one_stops_the_run() {
    let _serial = serial();
    let nats = NatsServer::start("limits");
    let (db, dir) = source("nats_limits", "l", "id int8 PRIMARY KEY");
    let cdc = cdc("nats_limits", &db, &dir);
    let _drop = DropSlot(&db, "nats_limits");
    let sink = format!("nats:{}", nats.url);
    // A work queue: messages go once consumed. Reported, and the changes go through.
    create_stream_with(
        &nats.url,
        Config {
            name: "QUEUE".into(),
            subjects: vec!["wq.>".into()],
            retention: RetentionPolicy::WorkQueue,
            ..Default::default()
        },
    );
    let mut running = Running(
        cdc.command_into(
            &sink,
            &[
                "--nats-stream",
                "QUEUE",
                "--nats-subject-prefix",
                "wq",
                "--create-slot",
                "--stop-after",
                "1",
            ],
        )
        .spawn()
        .unwrap(),
    );
    wait_streaming(&db, "nats_limits", &mut running);
    db.run("INSERT INTO l VALUES (1);").unwrap();
    let (ok, err) = running.finish(Duration::from_secs(30));
    assert!(ok, "{err}");
    assert!(
        err.contains("NATS stream QUEUE has retention WorkQueue"),
        "{err}"
    );
    // Room for one transaction (open marker, a change, commit marker) and no more.
    create_stream_with(
        &nats.url,
        Config {
            name: "FULL".into(),
            subjects: vec!["full.>".into()],
            max_messages: 3,
            discard: DiscardPolicy::New,
            ..Default::default()
        },
    );
    let _ = std::fs::remove_file(dir.file("cdc.state"));
    wait_free(&db, "nats_limits");
    db.run("SELECT pg_drop_replication_slot('nats_limits');")
        .unwrap();
    let args = |extra: &'static [&'static str]| {
        let mut all = vec!["--nats-stream", "FULL", "--nats-subject-prefix", "full"];
        all.extend_from_slice(extra);
        all
    };
    let mut running = Running(
        cdc.command_into(&sink, &args(&["--create-slot"]))
            .spawn()
            .unwrap(),
    );
    wait_streaming(&db, "nats_limits", &mut running);
    db.run("INSERT INTO l VALUES (2);").unwrap();
    db.run("INSERT INTO l VALUES (3);").unwrap();
    let (ok, err) = running.finish(Duration::from_secs(60));
    assert!(!ok, "{err}");
    assert!(
        err.contains("NATS stream FULL has limits (max messages 3")
            && err.contains("once full it refuses new messages"),
        "{err}"
    );
    assert!(
        err.contains("NATS stream FULL refused a message") && err.contains("maximum messages"),
        "{err}"
    );
    assert_eq!(read_stream(&nats.url, "FULL").len(), 3);
    // The second transaction was not acknowledged: a restart resends it and is refused again.
    let out = cdc.command_into(&sink, &args(&[])).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("NATS stream FULL refused a message"), "{err}");
}

/// A credentials file (`--nats-creds`: a user's JWT and NKey seed, the operator's
/// decentralized authentication): the changes go through; a user of an account the operator
/// never issued is refused at once, naming the servers; the seed never shows.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical, the extension and nats-server: run through `cargo xtask test`"]
fn a_creds_file_authenticates_and_a_strangers_is_refused() {
    let _serial = serial();
    let keys = Dir::new("nats-operator");
    let operator = creds::operator(&keys.0);
    let config = operator.config.display().to_string();
    let nats = NatsServer::start_with("operator", &["-c", &config]);
    let (db, dir) = source("nats_creds", "c", "id int8 PRIMARY KEY");
    let cdc = cdc("nats_creds", &db, &dir);
    let _drop = DropSlot(&db, "nats_creds");
    let sink = format!("nats:{}", nats.url);
    let stranger = operator.stranger_creds.display().to_string();
    let started = Instant::now();
    let out = cdc
        .command_into(&sink, &["--create-slot", "--nats-creds", &stranger])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("NATS {}", nats.url)) && err.contains("authoriz"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not retried: {err}"
    );
    let user = operator.creds.display().to_string();
    let mut running = Running(
        cdc.command_into(
            &sink,
            &["--create-slot", "--nats-creds", &user, "--stop-after", "1"],
        )
        .spawn()
        .unwrap(),
    );
    wait_streaming(&db, "nats_creds", &mut running);
    db.run("INSERT INTO c VALUES (1);").unwrap();
    let (ok, err) = running.finish(Duration::from_secs(30));
    assert!(ok, "the change went through with the creds file: {err}");
    assert!(!err.contains(&operator.seed), "{err}");
}
