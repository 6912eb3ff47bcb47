//! One writer per recorded position: a session-level advisory lock in the sink's database,
//! taken before the position is read and held for the session's life.
//!
//! Why: a consumer killed while its `COMMIT` runs leaves that `COMMIT` to the server, which
//! finishes it after the client is gone, possibly after the next consumer opened the sink. A
//! position read then is the one from before that transaction: the next consumer would write
//! the transaction again (a replica meets its own rows, a change buffer holds the changes
//! twice). The old session holds the lock until its server process ends, which is after its
//! last `COMMIT`: a sink that has the lock reads a position no other session will move.
//!
//! The lock's key is `hashtextextended` of a text naming the position (its table and row),
//! as the single-`bigint` advisory lock of the sink's database; an unrelated lock taking the
//! same key is a 2^-64 chance, and costs a wait and a refusal naming the holder's PID, never
//! a wrong write. The sink needs a session of its own (no transaction-mode pooler between it
//! and the database: the lock, like the replica's temporary tables, belongs to the session).

use std::time::Duration;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::{Failure, db_error};

/// The key of the lock for `position`.
const KEY: &str = "pg_catalog.hashtextextended($1, 0)";

/// Takes the writer lock of `position` for this session, waiting up to `wait` for a session
/// that holds it to end (a killed consumer's finishing its last transaction; the wait is
/// said on stderr, with the holder's PID). `target`: what the sink writes, for messages.
pub async fn take(
    client: &Client,
    position: &str,
    wait: Duration,
    target: &str,
) -> Result<(), Failure> {
    let failed = |e: &tokio_postgres::Error| {
        db_error(&format!("cannot take the writer lock of {target}"), e)
    };
    let free: bool = client
        .query_one(
            &format!("SELECT pg_catalog.pg_try_advisory_lock({KEY})"),
            &[&position],
        )
        .await
        .map_err(|e| failed(&e))?
        .get(0);
    if free {
        return Ok(());
    }
    let holder = holder(client, position).await;
    eprintln!(
        "rowid-cdc: {target} is written by another session (server process {holder}) for the \
         same position; waiting up to {:.1} s for it to end (--slot-wait)",
        wait.as_secs_f64()
    );
    // Integral milliseconds, at least one: 0 would mean no timeout at all.
    let millis = wait.as_millis().clamp(1, i32::MAX as u128);
    client
        .batch_execute(&format!("SET lock_timeout = {millis}"))
        .await
        .map_err(|e| failed(&e))?;
    let locked = client
        .query_one(
            &format!("SELECT pg_catalog.pg_advisory_lock({KEY})"),
            &[&position],
        )
        .await;
    client
        .batch_execute(&format!(
            "SET lock_timeout = {}",
            super::SESSION_LOCK_TIMEOUT_MS
        ))
        .await
        .map_err(|e| failed(&e))?;
    match locked {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Err(Failure::from(format!(
            "{target} is written by another session (server process {}) for the same \
             position (waited {:.1} s, --slot-wait): another rowid-cdc writes it for this \
             slot, or the server is still finishing the last transaction of one that ended",
            self::holder(client, position).await,
            wait.as_secs_f64()
        ))),
        Err(e) => Err(failed(&e)),
    }
}

/// The PID of the session holding the lock of `position`, as text (`unknown` when it cannot
/// be read, or ended meanwhile).
async fn holder(client: &Client, position: &str) -> String {
    let pid = client
        .query_opt(
            &format!(
                "SELECT l.pid FROM pg_catalog.pg_locks l, (SELECT {KEY} AS k) AS h \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d \
                                     WHERE d.datname = pg_catalog.current_database()) \
                   AND l.classid = ((h.k >> 32) & 4294967295)::pg_catalog.oid \
                   AND l.objid = (h.k & 4294967295)::pg_catalog.oid \
                 LIMIT 1"
            ),
            &[&position],
        )
        .await;
    match pid {
        Ok(Some(row)) => row
            .get::<_, Option<i32>>(0)
            .map_or_else(|| "unknown".into(), |p| format!("PID {p}")),
        _ => "unknown".into(),
    }
}
