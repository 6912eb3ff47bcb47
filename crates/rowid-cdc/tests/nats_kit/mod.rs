//! What the NATS sink's tests share: `nats-server` processes with JetStream (one alone, or
//! nodes of a cluster), reading a stream back, an audited table and its workload, and the
//! comparison of the stream with the audit.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod creds;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::Config;
use rowid_testkit::psql::Psql;
use serde_json::Value;

use crate::common::{Dir, Running};

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `nats-server` with JetStream on loopback, killed when dropped; restartable with the same
/// ports and store.
pub struct NatsServer {
    child: Option<Child>,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    port: u16,
    args: Vec<String>,
    dir: Dir,
}

impl NatsServer {
    /// A server alone.
    pub fn start(name: &str) -> NatsServer {
        NatsServer::with(name, free_port(), Vec::new())
    }

    /// A server alone, with `extra` arguments (authentication).
    pub fn start_with(name: &str, extra: &[&str]) -> NatsServer {
        NatsServer::with(
            name,
            free_port(),
            extra.iter().map(|a| a.to_string()).collect(),
        )
    }

    /// Node `name` of cluster `cluster`: clients on `port`, routes on `route`, the other
    /// nodes' routes in `routes`.
    pub fn node(name: &str, port: u16, route: u16, routes: &[u16]) -> NatsServer {
        let routes: Vec<String> = routes
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect();
        NatsServer::with(
            name,
            port,
            vec![
                "-n".into(),
                name.into(),
                "--cluster_name".into(),
                "rowid".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{route}"),
                "--routes".into(),
                routes.join(","),
            ],
        )
    }

    fn with(name: &str, port: u16, extra: Vec<String>) -> NatsServer {
        let dir = Dir::new(&format!("nats-server-{name}"));
        let mut args = vec![
            "-js".to_string(),
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-sd".into(),
            dir.0.display().to_string(),
        ];
        args.extend(extra);
        let mut server = NatsServer {
            child: None,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            args,
            dir,
        };
        server.restart();
        server
    }

    /// Starts it (again), and waits until it listens.
    pub fn restart(&mut self) {
        self.child = Some(
            Command::new("nats-server")
                .args(&self.args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nats-server on PATH (cargo xtask test installs it)"),
        );
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "nats-server never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One message read back from a stream.
#[derive(Debug)]
pub struct Read {
    pub subject: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Read {
    /// Header `name` (any case), or empty.
    pub fn header(&self, name: &str) -> String {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// (xid, op, old identity, new identity) of the change.
    pub fn change(&self) -> Change {
        let s = |k: &str| self.body[k].as_str().unwrap_or("").to_string();
        (
            self.body["xid"].to_string(),
            s("op"),
            s("old_id"),
            s("new_id"),
        )
    }
}

/// A client of `url`, with the user and password or token its user information carries.
pub async fn connect(url: &str) -> async_nats::Client {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (options, host) = match rest.rsplit_once('@') {
        Some((info, host)) => (
            match info.split_once(':') {
                Some((user, pass)) => {
                    async_nats::ConnectOptions::with_user_and_password(user.into(), pass.into())
                }
                None => async_nats::ConnectOptions::with_token(info.into()),
            },
            host,
        ),
        None => (async_nats::ConnectOptions::new(), rest),
    };
    options.connect(format!("{scheme}://{host}")).await.unwrap()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every message of stream `name`, in stream order (through an ordered consumer).
pub fn read_stream(url: &str, name: &str) -> Vec<Read> {
    use async_nats::jetstream::consumer::pull::OrderedConfig;
    use futures_util::StreamExt;
    runtime().block_on(async {
        let js = async_nats::jetstream::new(connect(url).await);
        let mut stream = js.get_stream(name).await.unwrap();
        let count = stream.info().await.unwrap().state.messages;
        let consumer = stream
            .create_consumer(OrderedConfig::default())
            .await
            .unwrap();
        let mut messages = consumer.messages().await.unwrap();
        let mut out = Vec::new();
        while (out.len() as u64) < count {
            let m = messages.next().await.unwrap().unwrap().message;
            let headers = m
                .headers
                .iter()
                .flat_map(|h| h.iter())
                .map(|(k, v)| (k.to_string(), v[0].to_string()))
                .collect();
            out.push(Read {
                subject: m.subject.to_string(),
                headers,
                body: serde_json::from_slice(&m.payload).unwrap(),
            });
        }
        out
    })
}

/// Messages in stream `name` (changes and markers).
pub fn stream_messages(url: &str, name: &str) -> u64 {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(connect(url).await);
        let mut stream = js.get_stream(name).await.unwrap();
        stream.info().await.unwrap().state.messages
    })
}

/// Creates stream `name` with `subjects`, a de-duplication window of `window` and `replicas`
/// replicas, asking again for up to a minute while a cluster elects its leaders.
pub fn create_stream(url: &str, name: &str, subjects: &[&str], window: Duration, replicas: usize) {
    create_stream_with(
        url,
        Config {
            name: name.to_string(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            duplicate_window: window,
            num_replicas: replicas,
            ..Default::default()
        },
    );
}

/// Creates the stream `config` describes, asking again for up to a minute while a cluster
/// elects its leaders.
pub fn create_stream_with(url: &str, config: Config) {
    runtime().block_on(async {
        let t = Instant::now();
        loop {
            let created = async {
                let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
                async_nats::jetstream::new(client)
                    .create_stream(config.clone())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            .await;
            match created {
                Ok(()) => return,
                Err(e) if t.elapsed() < Duration::from_secs(60) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("stream {} not created: {e}", config.name),
            }
        }
    });
}

/// Replaces stream `config.name`'s configuration with `config`.
pub fn update_stream(url: &str, config: Config) {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(connect(url).await);
        js.update_stream(config).await.unwrap();
    });
}

/// Removes every message of stream `name`.
pub fn purge_stream(url: &str, name: &str) {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(connect(url).await);
        js.get_stream(name).await.unwrap().purge().await.unwrap();
    });
}

/// Publishes `body` on `subject` (no id).
pub fn publish(url: &str, subject: &str, body: &str) {
    runtime().block_on(async {
        let js = async_nats::jetstream::new(connect(url).await);
        js.publish(subject.to_string(), body.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
}

/// (xid, op, old identity, new identity) of a change.
pub type Change = (String, String, String, String);

/// Table `nk` (int8 key) in publication `publication`, with an audit trigger recording each
/// change's identities by `encode_row_id_v2` in its own transaction.
pub fn audited_table(db: &Psql, publication: &str) {
    db.run(&format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE nk (id int8 PRIMARY KEY, v int4);
         CREATE PUBLICATION {publication} FOR TABLE nk;
         CREATE TABLE audit (seq bigserial, op text, old_id bytea, new_id bytea,
           xid bigint DEFAULT txid_current() % 4294967296);
         CREATE FUNCTION audit_nk() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO audit (op, old_id, new_id) VALUES (lower(TG_OP),
             CASE WHEN TG_OP <> 'INSERT' THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(OLD.id)) END,
             CASE WHEN TG_OP <> 'DELETE' THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(NEW.id)) END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit_nk AFTER INSERT OR UPDATE OR DELETE ON nk
           FOR EACH ROW EXECUTE FUNCTION audit_nk();"
    ))
    .unwrap();
}

/// The workload: `n` transactions on `nk`, each an insert, an update, every third a key
/// change and every fourth a delete of earlier rows (one session: commit order is the
/// audit's order); about 2.6 changes per transaction.
pub fn workload(n: u32) -> String {
    format!(
        "DO $$
         BEGIN
           FOR i IN 1..{n} LOOP
             INSERT INTO nk VALUES (i * 10, i);
             UPDATE nk SET v = v + 1 WHERE id = (i - 1) * 10;
             IF i % 3 = 0 THEN UPDATE nk SET id = id + 5 WHERE id = (i - 2) * 10; END IF;
             IF i % 4 = 0 THEN DELETE FROM nk WHERE id = (i - 3) * 10; END IF;
             COMMIT;
           END LOOP;
         END $$;"
    )
}

/// What the audit recorded, in commit order.
pub fn audit(db: &Psql) -> Vec<Change> {
    db.run(
        "SELECT xid, op, coalesce(encode(old_id, 'hex'), ''), coalesce(encode(new_id, 'hex'), '') \
         FROM audit ORDER BY seq;",
    )
    .unwrap()
    .lines()
    .map(|l| {
        let mut p = l.split('|').map(str::to_string);
        let mut next = || p.next().unwrap_or_default();
        (next(), next(), next(), next())
    })
    .collect()
}

/// Waits until stream `name` holds the audit's changes and their transactions' two markers
/// each (a resend adds none: the stream drops it), for `within`; the changes (its messages
/// but the markers under `prefix`).
pub fn wait_changes(
    url: &str,
    name: &str,
    prefix: &str,
    audit: &[Change],
    within: Duration,
    running: &mut Running,
) -> Vec<Read> {
    let transactions: std::collections::BTreeSet<&String> = audit.iter().map(|c| &c.0).collect();
    let expected = (audit.len() + 2 * transactions.len()) as u64;
    let t = Instant::now();
    loop {
        let held = stream_messages(url, name);
        if held >= expected {
            break;
        }
        assert!(
            t.elapsed() < within,
            "{held} of {expected} messages in the stream; {}",
            running.report()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let markers = format!("{prefix}._slot.");
    read_stream(url, name)
        .into_iter()
        .filter(|m| !m.subject.starts_with(&markers))
        .collect()
}

/// The stream's changes equal the audit, change for change, in order.
pub fn assert_equals_audit(changes: &[Read], audit: &[Change]) {
    let in_stream: Vec<Change> = changes.iter().map(Read::change).collect();
    let first_difference = in_stream.iter().zip(audit).position(|(a, b)| a != b);
    assert_eq!(
        (in_stream.len(), first_difference),
        (audit.len(), None),
        "the stream equals the audit, change for change (first difference at that index)"
    );
}
