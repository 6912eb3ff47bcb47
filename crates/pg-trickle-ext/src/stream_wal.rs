//! Stream tables whose change buffers `rowid-cdc`'s PostgreSQL sink fills from the WAL
//! (`cdc_mode => 'wal'`, spec/stream-tables.md §5.6).
//!
//! Such a buffer lags its source: the sink writes a transaction after it committed. A
//! DIFFERENTIAL refresh reads the window and the sources in one snapshot, so before that
//! snapshot is taken the buffers must hold every transaction it will see of the sources.
//! [`cover`] makes that so: no source writer in flight (a `SHARE` lock on each source, held to
//! the transaction's end), a non-transactional logical message written after that, and a wait
//! until the sink recorded, in its position table, that its stream reached that message with
//! everything before it committed (`covered_lsn`, spec/change-buffer.md §5). The refresh's
//! statement then runs under a snapshot taken after the wait.

use std::time::{Duration, Instant};

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use rowid_registry::buffer::{COVERAGE_PREFIX, DEFAULT_SCHEMA, DEFAULT_WAL_PREFIX, POSITION_TABLE};
use rowid_registry::sql::QualifiedName;

use crate::guard::as_owner;
use crate::{errors, spi};

/// Where a DIFFERENTIAL stream table's change buffers come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cdc {
    /// The extension's capture trigger (`capture_table`).
    Trigger,
    /// `rowid-cdc --sink postgres:` from a logical slot, into `pgtrickle_changes.rowid_cdc_<oid>`.
    Wal,
}

impl Cdc {
    /// The catalog's spelling (`pgt_stream_tables.cdc_mode`).
    pub fn name(self) -> &'static str {
        match self {
            Cdc::Trigger => "trigger",
            Cdc::Wal => "wal",
        }
    }

    /// `text` as a CDC mode (any case), or the error naming the accepted ones.
    pub fn parse(function: &str, text: &str) -> Cdc {
        match text.to_ascii_lowercase().as_str() {
            "trigger" => Cdc::Trigger,
            "wal" => Cdc::Wal,
            _ => errors::invalid_argument(
                function,
                format!("cdc_mode {text:?} is not one of 'trigger', 'wal'"),
            ),
        }
    }
}

/// How long a refresh waits at most for the sink to cover the sources' last commits.
const COVER_LIMIT: Duration = Duration::from_secs(60);

/// The buffers' prefix as the sink records it in its position table (the quoted prefix).
fn prefix() -> QualifiedName {
    QualifiedName::new(DEFAULT_SCHEMA, DEFAULT_WAL_PREFIX)
}

fn position_table() -> QualifiedName {
    QualifiedName::new(DEFAULT_SCHEMA, POSITION_TABLE)
}

/// The buffer the sink fills for `source`, quoted, after checking (for `create_stream_table`)
/// that the caller owns the source and that the buffer exists and belongs to a superuser or
/// to a role the caller is a member of (its rows become the stream table's). [`slot`] checks
/// the sink that writes it.
pub fn buffer(function: &str, source: pg_sys::Oid) -> String {
    let relation = crate::catalog::relation_name(source);
    let owns = spi::one::<bool>(
        "SELECT pg_catalog.pg_has_role(relowner, 'USAGE') FROM pg_catalog.pg_class \
         WHERE oid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(source)],
    );
    if owns != Some(true) {
        errors::refused(
            function,
            "42501",
            &format!("must be the owner of {relation} to keep a stream table of it"),
        );
    }
    let name = QualifiedName::new(
        DEFAULT_SCHEMA,
        &format!("{DEFAULT_WAL_PREFIX}_{}", u32::from(source)),
    );
    let quoted = name.quoted();
    let trusted = spi::one::<bool>(
        "SELECT r.rolsuper OR pg_catalog.pg_has_role(c.relowner, 'USAGE') \
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.relowner \
         WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1) AND c.relkind OPERATOR(pg_catalog.=) 'r'",
        &[DatumWithOid::from(quoted.as_str())],
    );
    match trusted {
        None => errors::refused(
            function,
            "55000",
            &format!(
                "{relation} has no WAL change buffer {quoted}: rowid-cdc --sink postgres: \
                 creates it when it writes the first change of {relation} it streams (publish \
                 {relation}, start rowid-cdc, write to {relation}), or use cdc_mode => 'trigger'"
            ),
        ),
        Some(false) => errors::refused(
            function,
            "42501",
            &format!(
                "{quoted} belongs to a role that is neither a superuser nor one you are a \
                 member of: its rows would become the stream table's"
            ),
        ),
        Some(true) => {}
    }
    quoted
}

/// The slot whose sink writes the buffers, checked: exactly one row of the position table
/// for the prefix, a slot of this database, and a sink that records its coverage (the
/// `covered_lsn` column). Its name.
pub fn slot(function: &str) -> String {
    let table = position_table().quoted();
    let exists = spi::one::<bool>(
        "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
        &[DatumWithOid::from(table.as_str())],
    );
    if exists != Some(true) {
        errors::refused(
            function,
            "55000",
            &format!("{table} does not exist: no rowid-cdc sink writes these buffers"),
        );
    }
    let covered_column = spi::one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute \
           WHERE attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1) \
             AND attname OPERATOR(pg_catalog.=) 'covered_lsn' AND NOT attisdropped)",
        &[DatumWithOid::from(table.as_str())],
    );
    if covered_column != Some(true) {
        errors::refused(
            function,
            "55000",
            &format!(
                "{table} has no covered_lsn column: the rowid-cdc writing it predates WAL-fed \
                 stream tables; run a rowid-cdc that records its coverage"
            ),
        );
    }
    let slots: Vec<(String, bool)> = as_owner(crate::catalog::extension_owner(), || {
        spi::rows(
            &format!(
                "SELECT p.slot, s.slot_name IS NOT NULL FROM {table} p \
                 LEFT JOIN pg_catalog.pg_replication_slots s \
                   ON s.slot_name OPERATOR(pg_catalog.=) p.slot \
                  AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database() \
                 WHERE p.buffer OPERATOR(pg_catalog.=) $1 ORDER BY p.slot"
            ),
            &[DatumWithOid::from(prefix().quoted().as_str())],
            |r| {
                Ok((
                    r.get::<String>(1)?.unwrap_or_default(),
                    r.get::<bool>(2)?.unwrap_or(false),
                ))
            },
        )
    });
    match slots.as_slice() {
        [(slot, true)] => slot.clone(),
        [(slot, false)] => errors::refused(
            function,
            "55000",
            &format!("the buffers' slot {slot:?} is not a replication slot of this database"),
        ),
        [] => errors::refused(
            function,
            "55000",
            &format!("{table} records no slot writing {}", prefix().quoted()),
        ),
        many => errors::refused(
            function,
            "55000",
            &format!(
                "{table} records {} slots writing {}: {}; a stream table reads buffers one \
                 consumer writes",
                many.len(),
                prefix().quoted(),
                many.iter()
                    .map(|(s, _)| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// Makes the WAL-fed buffers of `sources` hold every transaction the next snapshot sees of
/// them (this module's documentation): refuses a transaction whose snapshot is fixed or that
/// wrote a source itself (its changes reach the buffer only after it commits), locks the
/// sources in `SHARE` mode (writers wait until the transaction ends), writes the coverage
/// message and waits until the sink recorded it.
pub fn cover(function: &str, table: &str, sources: &[pg_sys::Oid]) {
    // SAFETY: reads a backend-local setting of the running transaction.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        errors::refused(
            function,
            "0A000",
            &format!(
                "{table} reads change buffers rowid-cdc fills from the WAL: its refresh needs a \
                 snapshot taken after the buffers caught up, so it runs only in a READ \
                 COMMITTED transaction"
            ),
        );
    }
    let mut ordered: Vec<pg_sys::Oid> = sources.to_vec();
    ordered.sort_by_key(|o| u32::from(*o));
    ordered.dedup();
    let written: Vec<String> = spi::rows(
        "SELECT DISTINCT l.relation::pg_catalog.regclass::pg_catalog.text \
         FROM pg_catalog.pg_locks l \
         WHERE l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() \
           AND l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.granted \
           AND l.relation OPERATOR(pg_catalog.=) ANY ($1) \
           AND l.mode OPERATOR(pg_catalog.=) ANY (ARRAY['RowExclusiveLock', \
             'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock'])",
        &[DatumWithOid::from(ordered.clone())],
        |r| Ok(r.get::<String>(1)?.unwrap_or_default()),
    );
    if !written.is_empty() {
        errors::refused(
            function,
            "0A000",
            &format!(
                "{table} reads change buffers rowid-cdc fills from the WAL, and this \
                 transaction wrote (or locked for writing) {}: its changes reach the buffers \
                 only after it commits; refresh after COMMIT",
                written.join(", ")
            ),
        );
    }
    for source in &ordered {
        // SAFETY: a relation lock on a source's OID (the catalog records it), held to the
        // transaction's end.
        unsafe { pg_sys::LockRelationOid(*source, pg_sys::ShareLock as pg_sys::LOCKMODE) };
    }
    let slot = slot(function);
    let mark: Option<(String, i64)> = as_owner(crate::catalog::extension_owner(), || {
        spi::rows_mut_map(
            &format!(
                "SELECT m::pg_catalog.text, \
                   (m OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.int8 \
                 FROM pg_catalog.pg_logical_emit_message(false, '{COVERAGE_PREFIX}', '') AS m"
            ),
            &[],
            |r| {
                Ok((
                    r.get::<String>(1)?.unwrap_or_default(),
                    r.get::<i64>(2)?.unwrap_or(0),
                ))
            },
        )
        .pop()
    });
    let Some((mark, position)) = mark else {
        errors::invalid_argument(function, "the coverage message gave no position".into());
    };
    // A non-transactional message is not flushed by itself (before PostgreSQL 17's `flush`
    // argument), and a WAL sender reads only flushed WAL: without this the sink sees it when
    // something else flushes, a second or more later.
    // SAFETY: flushes WAL this backend inserted, up to its own message's position.
    unsafe { pg_sys::XLogFlush(position as pg_sys::XLogRecPtr) };
    let started = Instant::now();
    let check = format!(
        "SELECT p.covered_lsn OPERATOR(pg_catalog.>=) $2::pg_catalog.pg_lsn, \
           p.covered_lsn::pg_catalog.text, \
           (SELECT s.active FROM pg_catalog.pg_replication_slots s \
            WHERE s.slot_name OPERATOR(pg_catalog.=) p.slot) \
         FROM {} p WHERE p.buffer OPERATOR(pg_catalog.=) $1 AND p.slot OPERATOR(pg_catalog.=) $3",
        position_table().quoted()
    );
    let prefix = prefix().quoted();
    loop {
        let state = as_owner(crate::catalog::extension_owner(), || {
            spi::with_latest_snapshot(|| {
                spi::rows(
                    &check,
                    &[
                        DatumWithOid::from(prefix.as_str()),
                        DatumWithOid::from(mark.as_str()),
                        DatumWithOid::from(slot.as_str()),
                    ],
                    |r| {
                        Ok((
                            r.get::<bool>(1)?.unwrap_or(false),
                            r.get::<String>(2)?,
                            r.get::<bool>(3)?.unwrap_or(false),
                        ))
                    },
                )
            })
        })
        .pop();
        let (done, covered, active) = state.unwrap_or((false, None, false));
        if done {
            return;
        }
        let covered = covered.unwrap_or_else(|| "nothing".into());
        if !active {
            errors::refused(
                function,
                "55000",
                &format!(
                    "{table} waits for slot {slot:?} to cover {mark} (it covers {covered}), and \
                     nothing streams from that slot: is rowid-cdc running?"
                ),
            );
        }
        if started.elapsed() > COVER_LIMIT {
            errors::refused(
                function,
                "57014",
                &format!(
                    "{table} waited {}s for slot {slot:?} to cover {mark} (it covers \
                     {covered}): rowid-cdc is behind or stalled",
                    COVER_LIMIT.as_secs()
                ),
            );
        }
        spi::run("SELECT pg_catalog.pg_sleep(0.002)", &[]);
    }
}
