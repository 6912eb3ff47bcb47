//! `--heartbeat SECS`: for a database that is itself idle while others in the cluster write.
//! Every SECS seconds a non-transactional logical message (prefix `pgtrickle.heartbeat`) is
//! written into this database's WAL; the stream carries it outside any transaction, and its
//! position is acknowledged like a keepalive's ([`crate::pipeline::Pipeline::idle_at`]), so the
//! slot releases the WAL before it. Who may write such a message does not matter: a position
//! the stream reached with nothing in flight is safe to acknowledge whatever put it there.

use std::time::Duration;

use crate::connect::conninfo::Conninfo;
use crate::connect::net;

/// The prefix of heartbeat messages.
pub const PREFIX: &str = "pgtrickle.heartbeat";

/// Writes a heartbeat every `every` until the task is dropped; reconnects after a failure,
/// reporting the first of a streak on stderr.
pub fn spawn(info: Conninfo, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reported = false;
        loop {
            tokio::time::sleep(every).await;
            let connected = match net::connect(&info).await {
                Ok(c) => c,
                Err(e) => {
                    if !reported {
                        eprintln!("rowid-cdc: heartbeat: {e}; retrying every {every:?}");
                        reported = true;
                    }
                    continue;
                }
            };
            let client = connected.client;
            let connection = tokio::spawn(connected.connection);
            reported = false;
            loop {
                let sql =
                    format!("SELECT pg_catalog.pg_logical_emit_message(false, '{PREFIX}', '')");
                if let Err(e) = client.execute(sql.as_str(), &[]).await {
                    eprintln!(
                        "rowid-cdc: heartbeat: {}; reconnecting",
                        net::describe(&e).0
                    );
                    break;
                }
                tokio::time::sleep(every).await;
            }
            connection.abort();
        }
    })
}
