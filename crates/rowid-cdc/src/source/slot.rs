//! The replication slot: what `pg_replication_slots` says of it, and its creation with the
//! identity schemas read at its consistent point (the exported snapshot).

use std::time::{Duration, Instant};

use pgwire_replication::ReplicationClient;
use rowid_registry::schema_message::RelationSchema;
use tokio_postgres::Client;

use super::checks;
use crate::error::{CdcError, setup};
use crate::lsn::Lsn;

/// A slot as `pg_replication_slots` shows it.
#[derive(Debug)]
pub struct SlotInfo {
    /// The walsender holding it, if any.
    pub active_pid: Option<i32>,
    /// Its output plugin.
    pub plugin: Option<String>,
    /// `confirmed_flush_lsn`.
    pub confirmed: Option<Lsn>,
}

/// Slot names reach START_REPLICATION unquoted: PostgreSQL's own rule for them.
pub fn check_name(slot: &str) -> Result<(), CdcError> {
    let ok = !slot.is_empty()
        && slot.len() < 64
        && slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(setup(format!(
            "--slot {slot:?}: a replication slot name has 1-63 lower-case letters, digits and \
             underscores"
        )))
    }
}

/// The slot, if it exists; slot names are cluster-wide, so one of another database or kind
/// is an error naming it.
pub async fn info(client: &Client, slot: &str) -> Result<Option<SlotInfo>, CdcError> {
    let Some(row) = client
        .query_opt(
            "SELECT active_pid, plugin::pg_catalog.text, slot_type, database::pg_catalog.text, \
                    database OPERATOR(pg_catalog.=) pg_catalog.current_database(), \
                    confirmed_flush_lsn::pg_catalog.text \
             FROM pg_catalog.pg_replication_slots WHERE slot_name OPERATOR(pg_catalog.=) $1",
            &[&slot],
        )
        .await?
    else {
        return Ok(None);
    };
    let kind: String = row.get(2);
    let plugin: Option<String> = row.get(1);
    if kind != "logical" || plugin.as_deref() != Some("pgoutput") {
        return Err(setup(format!(
            "slot {slot:?} is a {kind} slot with plugin {}: rowid-cdc needs a logical pgoutput slot",
            plugin.unwrap_or_else(|| "none".into())
        )));
    }
    if row.get::<_, Option<bool>>(4) != Some(true) {
        return Err(setup(format!(
            "slot {slot:?} belongs to database {}: slot names are cluster-wide, choose another",
            row.get::<_, Option<String>>(3).unwrap_or_default()
        )));
    }
    let confirmed = row
        .get::<_, Option<String>>(5)
        .and_then(|s| s.parse::<Lsn>().ok());
    Ok(Some(SlotInfo {
        active_pid: row.get(0),
        plugin,
        confirmed,
    }))
}

/// [`info`] once no process holds the slot, waiting up to `wait` for one that does to let
/// go: a consumer that has just ended (killed, or its connection lost) leaves a server
/// process holding the slot until that process notices, usually within milliseconds, at
/// worst after `wal_sender_timeout`. Refused, naming the holder, when it still holds it then.
pub async fn released(
    client: &Client,
    slot: &str,
    wait: Duration,
) -> Result<Option<SlotInfo>, CdcError> {
    let started = Instant::now();
    let mut said = false;
    loop {
        let info = info(client, slot).await?;
        let Some(pid) = info.as_ref().and_then(|s| s.active_pid) else {
            return Ok(info);
        };
        if started.elapsed() >= wait {
            return Err(setup(format!(
                "slot {slot:?} is in use by the process with PID {pid} (waited {:.1} s, \
                 --slot-wait): another consumer follows it, or the server process of one that \
                 ended has not noticed yet (it does at wal_sender_timeout at the latest)",
                wait.as_secs_f64()
            )));
        }
        if !said {
            eprintln!(
                "rowid-cdc: slot {slot:?} is in use by the process with PID {pid}; waiting up \
                 to {:.1} s for it to be released (--slot-wait)",
                wait.as_secs_f64()
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A slot just created: the replication connection that created it (gated: not streaming
/// yet), its consistent point, and the identity schemas as of that point.
pub struct Created {
    /// The connection; START_REPLICATION runs on it.
    pub replication: ReplicationClient,
    /// The slot's consistent point.
    pub consistent: Lsn,
    /// The published tables' identity schemas at that point.
    pub schemas: Vec<RelationSchema>,
    /// The snapshot the slot exported, valid until the replication connection's next
    /// command: the initial snapshot is read under it.
    pub snapshot: String,
}

/// Creates the slot on `replication` and reads the identity schemas at its consistent point
/// through `client`.
pub async fn create(
    mut replication: ReplicationClient,
    client: &mut Client,
    slot: &str,
    publication: &str,
) -> Result<Created, CdcError> {
    let rows = replication
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput (SNAPSHOT 'export')"
        ))
        .await
        .map_err(CdcError::Replication)?;
    let field = |i: usize| {
        rows.first()
            .and_then(|r| r.get(i).cloned().flatten())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok_or_else(|| setup("CREATE_REPLICATION_SLOT returned no row"))
    };
    let consistent: Lsn = field(1)?
        .parse()
        .map_err(|e| setup(format!("consistent point: {e}")))?;
    let snapshot = field(2)?;
    // The exported snapshot lives until the replication connection's next command: read the
    // schemas as of the consistent point now, before START_REPLICATION.
    let tx = at_snapshot(client, &snapshot).await?;
    let schemas = checks::schemas(&tx, publication).await?;
    tx.commit().await?;
    Ok(Created {
        replication,
        consistent,
        schemas,
        snapshot,
    })
}

/// A read-only transaction that sees the database as the exported snapshot `snapshot` does.
pub async fn at_snapshot<'a>(
    client: &'a mut Client,
    snapshot: &str,
) -> Result<tokio_postgres::Transaction<'a>, CdcError> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    tx.batch_execute(&format!(
        "SET TRANSACTION SNAPSHOT '{}'",
        snapshot.replace('\'', "''")
    ))
    .await?;
    Ok(tx)
}

/// Drops a slot this run created and will not use (a refusal after its creation).
pub async fn drop(client: &Client, slot: &str) -> Result<(), CdcError> {
    client
        .execute("SELECT pg_catalog.pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}
