//! TLS and passwords, against a cluster of its own listening on TCP with a certificate signed
//! by a CA this test makes (`openssl`): libpq's `sslmode` and `sslrootcert` for the
//! replication connection, the SQL connection and a PostgreSQL sink; a certificate for
//! another host name refused under `verify-full` and accepted under `verify-ca`; a foreign
//! CA refused; a password taken from `PGPASSWORD` or the password file (never the command
//! line), a password file others can read ignored; and a server asking for the password in
//! clear text over a connection without TLS refused before the password is sent.
//!
//! Needs the PostgreSQL binaries (with the extension installed) first on `PATH` and
//! `openssl`: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{ca, signed_certificate};
use rowid_testkit::cluster::Cluster;
use rowid_testkit::psql::Psql;

/// The certificate's host name (resolved nowhere: the tests connect with `hostaddr`).
const NAME: &str = "db.test";

/// `server.crt` / `server.key` for `NAME`, signed by `ca`.
fn server_certificate(dir: &Path, ca: &str) {
    signed_certificate(dir, ca, &format!("DNS:{NAME}"));
}

struct Server {
    cluster: Cluster,
    dir: PathBuf,
}

impl Server {
    fn start() -> Server {
        let dir = std::env::temp_dir().join(format!("rowid-cdc-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ca(&dir, "ca");
        ca(&dir, "other_ca");
        server_certificate(&dir, "ca");
        let port = 56_000 + (std::process::id() % 1000) as u16;
        let cluster = Cluster::start(
            &rowid_testkit::cluster::server_bindir(),
            &dir.join("cluster"),
            port,
        )
        .unwrap();
        for f in ["server.crt", "server.key"] {
            cluster
                .write_file(f, &std::fs::read(dir.join(f)).unwrap())
                .unwrap();
        }
        // tls_scram: SCRAM over TLS only. clear: the password in clear text, with or without
        // TLS (the server would take it either way; the client must not send it without).
        cluster
            .write_file(
                "pg_hba.conf",
                b"local all all trust\n\
                  hostssl all tls_scram 127.0.0.1/32 scram-sha-256\n\
                  host all clear 127.0.0.1/32 password\n\
                  hostssl all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
        cluster
            .restart(
                "-c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file=server.crt \
                 -c ssl_key_file=server.key",
            )
            .unwrap();
        let psql = cluster.psql();
        psql.run(
            "CREATE ROLE tls_scram LOGIN REPLICATION PASSWORD 'scram-secret';
             CREATE ROLE clear LOGIN REPLICATION PASSWORD 'clear-secret';
             CREATE EXTENSION pg_trickle_ext;
             SELECT pgtrickle.enable_identity_messages();
             SELECT pgtrickle.grant_capture('tls_scram');
             CREATE TABLE pub (id int8 PRIMARY KEY);
             CREATE PUBLICATION tls_pub FOR TABLE pub;",
        )
        .unwrap();
        Server { cluster, dir }
    }

    fn psql(&self) -> Psql {
        self.cluster.psql()
    }

    /// A TCP connection string as `user` to `host`, at 127.0.0.1, with `extra` options.
    fn dsn(&self, user: &str, host: &str, extra: &str) -> String {
        format!(
            "host={host} hostaddr=127.0.0.1 port={} dbname=postgres user={user} {extra}",
            self.cluster.port()
        )
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir.join("run"));
    }
}

/// Runs rowid-cdc with `dsn` and `env` until it stops by itself or `--stop-after 1` is
/// reached (`insert` is run once the slot is active); output and the slot's name.
fn follow(server: &Server, slot: &str, dsn: &str, env: &[(&str, String)], sink: &str) -> Output {
    let run = server.dir.join("run").join(slot);
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).unwrap();
    let sink = if sink == "jsonl" {
        format!("jsonl:{}", run.join("changes.jsonl").display())
    } else {
        sink.to_string()
    };
    let mut c = Command::new(env!("CARGO_BIN_EXE_rowid-cdc"));
    c.args([
        "--dsn",
        dsn,
        "--slot",
        slot,
        "--publication",
        "tls_pub",
        "--create-slot",
    ])
    .arg("--state")
    .arg(run.join("cdc.state"))
    .args(["--sink", &sink, "--stop-after", "1"])
    .env_remove("PGPASSWORD")
    .env_remove("PGPASSFILE")
    .env("HOME", &run)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().unwrap();
    let psql = server.psql();
    let t = Instant::now();
    let mut inserted = false;
    let pid = child.id().to_string();
    loop {
        let active = psql.run(&common::streaming_sql(slot)).unwrap();
        if active.trim() == "t" && !inserted {
            psql.run("INSERT INTO pub SELECT coalesce(max(id), 0) + 1 FROM pub;")
                .unwrap();
            inserted = true;
        }
        let gone = !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true);
        if gone || t.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill").args(["-9", &pid]).status();
    let out = child.wait_with_output().unwrap();
    let _ = psql.run(&format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE slot_name = '{slot}';"
    ));
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
#[ignore = "needs PostgreSQL binaries with the extension and openssl: run through `cargo xtask test`"]
fn tls_modes_and_passwords_behave_as_libpq() {
    let server = Server::start();
    let pw = |p: &str| vec![("PGPASSWORD", p.to_string())];
    let root = server.file("ca.crt");
    let foreign = server.file("other_ca.crt");

    // verify-full against the certificate's name, both connections and the sink over TLS,
    // the password from PGPASSWORD.
    let dsn = server.dsn(
        "tls_scram",
        NAME,
        &format!("sslmode=verify-full sslrootcert={root}"),
    );
    let out = follow(&server, "tls_full", &dsn, &pw("scram-secret"), "postgres:");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        server
            .psql()
            .buffer_rows("pgtrickle_changes", "rowid_cdc", "op")
            .unwrap(),
        "I\n",
        "{}",
        stderr(&out)
    );

    // The same certificate under another name: refused by verify-full, accepted by
    // verify-ca (the chain is good), refused by verify-ca with a foreign CA.
    let dsn = server.dsn(
        "tls_scram",
        "localhost",
        &format!("sslmode=verify-full sslrootcert={root}"),
    );
    let out = follow(
        &server,
        "tls_wrong_name",
        &dsn,
        &pw("scram-secret"),
        "jsonl",
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("TLS handshake failed")
            && stderr(&out).contains("not valid for name"),
        "{}",
        stderr(&out)
    );
    let dsn = server.dsn(
        "tls_scram",
        "localhost",
        &format!("sslmode=verify-ca sslrootcert={root}"),
    );
    let out = follow(&server, "tls_ca", &dsn, &pw("scram-secret"), "jsonl");
    assert!(out.status.success(), "{}", stderr(&out));
    for mode in ["verify-ca", "require"] {
        // require with a root certificate is verify-ca, as in libpq.
        let dsn = server.dsn(
            "tls_scram",
            NAME,
            &format!("sslmode={mode} sslrootcert={foreign}"),
        );
        let out = follow(&server, "tls_foreign", &dsn, &pw("scram-secret"), "jsonl");
        assert!(!out.status.success(), "{mode}");
        assert!(
            stderr(&out).contains("TLS handshake failed"),
            "{mode}: {}",
            stderr(&out)
        );
    }
    // require without a root certificate: encrypted, not verified.
    let dsn = server.dsn("tls_scram", "localhost", "sslmode=require");
    let out = follow(&server, "tls_require", &dsn, &pw("scram-secret"), "jsonl");
    assert!(out.status.success(), "{}", stderr(&out));
    // disable: the server allows this role over TLS only.
    let dsn = server.dsn("tls_scram", NAME, "sslmode=disable");
    let out = follow(&server, "tls_disable", &dsn, &pw("scram-secret"), "jsonl");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no encryption"), "{}", stderr(&out));

    // A clear-text password request without TLS: refused before the password is sent (the
    // server would have logged a failed or successful password authentication otherwise).
    let dsn = server.dsn("clear", NAME, "sslmode=disable");
    let out = follow(&server, "clear_plain", &dsn, &pw("clear-secret"), "jsonl");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("asks for the password in clear text and the connection has no TLS"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("clear-secret"));

    // The same over TLS is fine, the password from the password file (0600), never the
    // command line.
    let passfile = server.dir.join("pgpass");
    std::fs::write(&passfile, format!("{NAME}:*:*:clear:clear-secret\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let env = vec![("PGPASSFILE", passfile.display().to_string())];
    let dsn = server.dsn(
        "clear",
        NAME,
        &format!("sslmode=verify-full sslrootcert={root}"),
    );
    let out = follow(&server, "clear_tls", &dsn, &env, "jsonl");
    assert!(out.status.success(), "{}", stderr(&out));
    // A password file others can read is ignored, as libpq does: no password at all.
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = follow(&server, "clear_open", &dsn, &env, "jsonl");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("group or world access"),
        "{}",
        stderr(&out)
    );
}
