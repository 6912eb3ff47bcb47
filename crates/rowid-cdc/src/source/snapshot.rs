//! The initial snapshot (`--snapshot`): every published table's rows as of the slot's
//! consistent point, read under the snapshot the slot exported, before the stream's first
//! change. Rows are read with binary `COPY`, so each value arrives in its send form, the same
//! bytes pgoutput's binary tuples carry: identities and images come from the same code as the
//! stream's (the union of the snapshot and the stream is the table at every later position).
//!
//! Tables whose key encodes in its sort order are copied in key order, after the others, with
//! their cursor recorded at least once a second: the rows delivered by then are those of a
//! delivered chunk whose snapshot no stream change precedes, so a run killed during that copy
//! goes on in chunks while streaming ([`crate::chunks`]). The other tables cannot resume:
//! the exported snapshot lives only until the replication connection's next command, so the
//! state file records their copy pending first, and a restart during it refuses, naming the
//! fix ([`crate::state::SnapshotState`]). The stream starts after the copy: the slot keeps
//! the WAL written meanwhile (for a table too large for that, `--snapshot-table` reads it in
//! chunks while streaming).

use std::ops::Range;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use rowid_registry::schema_message::RelationSchema;
use rowid_registry::sql::{QualifiedName, quote_ident};
use tokio_postgres::Client;

use crate::config::Options;
use crate::error::{CdcError, setup};
use crate::event::SendRow;
use crate::lsn::Lsn;
use crate::pipeline::Pipeline;
use crate::sink::Sink;

/// The binary COPY signature (`PGCOPY\n\377\r\n\0`).
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Seconds between 1970-01-01 and 2000-01-01.
const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;

/// What the initial copy reads under: the slot's exported snapshot, its consistent point,
/// and the identity schema table the copy's checks trust.
pub struct Exported<'a> {
    /// The snapshot's name (`pg_export_snapshot`'s form).
    pub snapshot: &'a str,
    /// The slot's consistent point.
    pub consistent: Lsn,
    /// The OID of the identity schema table.
    pub identity_table: u32,
}

/// The initial snapshot into `pipe` (`--snapshot`) through `client`, under the exported
/// snapshot `at`: the `whole` tables, then those `in_key_order` ([`copy`]), with a second
/// connection that sees the latest catalog.
pub async fn initial(
    opts: &Options,
    client: &mut Client,
    at: &Exported<'_>,
    whole: &[RelationSchema],
    in_key_order: &[RelationSchema],
    pipe: &mut Pipeline<Box<dyn Sink>>,
) -> Result<(), CdcError> {
    pipe.snapshot_begin(whole.len())
        .map_err(CdcError::Pipeline)?;
    pause_before_copy().await;
    let (latest, _) = super::checks::connect(&opts.dsn).await?;
    let latest = Latest {
        client: &latest,
        identity_table: at.identity_table,
        slot: &opts.slot,
        state: &opts.state,
    };
    copy(
        client,
        at.snapshot,
        &opts.publication,
        at.consistent,
        whole,
        in_key_order,
        &latest,
        pipe,
        opts.progress,
        opts.snapshot_checkpoint,
    )
    .await?;
    for notice in pipe.take_notices() {
        eprintln!("rowid-cdc: notice: {notice}");
    }
    Ok(())
}

/// For tests: `ROWID_CDC_TEST_PAUSE_BEFORE_COPY_MS` milliseconds between the slot's creation
/// and the initial copy, so that a test can commit a DDL in that window deterministically
/// (`tests/snapshot.rs`). Unset in any real run: no pause.
async fn pause_before_copy() {
    let pause = std::env::var("ROWID_CDC_TEST_PAUSE_BEFORE_COPY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = pause {
        tokio::time::sleep(std::time::Duration::from_millis(ms.min(60_000))).await;
    }
}

/// Copies every table of `keyless` and then of `keyed` into `pipe` under the exported snapshot
/// `snapshot`, locked against DDL (`ACCESS SHARE`) for the copy; returns the number of rows.
/// The `keyless` tables are copied first and recorded done together
/// ([`Pipeline::snapshot_end`], not resumable); each `keyed` table (its key encodes in its
/// sort order: [`super::chunk_reader::chunkable`]) is then copied in key order with a
/// checkpoint every `checkpoint` ([`Pipeline::snapshot_checkpoint`]; the clock is read every
/// 4096 rows), so a run killed during it goes on in chunks from its last checkpoint.
/// `progress`: a line on stderr at most once a second.
#[allow(clippy::too_many_arguments)]
pub async fn copy(
    client: &mut Client,
    snapshot: &str,
    publication: &str,
    consistent: Lsn,
    keyless: &[RelationSchema],
    keyed: &[RelationSchema],
    latest: &Latest<'_>,
    pipe: &mut Pipeline<Box<dyn Sink>>,
    progress: bool,
    checkpoint_every: Duration,
) -> Result<u64, CdcError> {
    let tx = super::slot::at_snapshot(client, snapshot).await?;
    let ts = now_pg_micros();
    let mut estimate = 0u64;
    let mut plans = Vec::with_capacity(keyless.len() + keyed.len());
    // No DDL of these tables commits until the copy ends; one that committed between the
    // slot's creation and the locks would have the rows read in its shape, not the
    // consistent point's: refused, before anything else is read.
    let copied: Vec<&RelationSchema> = keyless.iter().chain(keyed).collect();
    let names: Vec<String> = copied
        .iter()
        .map(|s| QualifiedName::new(&s.namespace, &s.relname).quoted())
        .collect();
    for lock in names.chunks(100) {
        let locked = tx
            .batch_execute(&format!(
                "LOCK TABLE {} IN ACCESS SHARE MODE",
                lock.join(", ")
            ))
            .await;
        if let Err(e) = locked {
            // Renamed or dropped since: the check names the table when it can.
            latest.check_unchanged(&copied).await?;
            return Err(e.into());
        }
    }
    latest.check_unchanged(&copied).await?;
    let tables = keyless
        .iter()
        .map(|s| (s, false))
        .chain(keyed.iter().map(|s| (s, true)));
    for (s, in_key_order) in tables {
        let row = tx
            .query_one(
                "SELECT c.relkind::pg_catalog.text, c.reltuples::pg_catalog.float8, \
                        p.rowfilter IS NOT NULL, p.attnames::pg_catalog.text[] \
                 FROM pg_catalog.pg_class c, pg_catalog.pg_publication_tables p \
                 WHERE c.oid OPERATOR(pg_catalog.=) $1 AND p.pubname OPERATOR(pg_catalog.=) $2 \
                   AND p.schemaname OPERATOR(pg_catalog.=) $3 \
                   AND p.tablename OPERATOR(pg_catalog.=) $4",
                &[&s.relid, &publication, &s.namespace, &s.relname],
            )
            .await?;
        let name = s.qualified_name();
        let kind: String = row.get(0);
        let filtered: bool = row.get(2);
        let published: Vec<String> = row.get(3);
        let columns: Vec<&str> = s.columns.iter().map(|c| c.name.as_str()).collect();
        if filtered || published != columns {
            return Err(setup(format!(
                "--snapshot: publication {publication} publishes {name} with a row filter or a \
                 column list, which the snapshot's COPY would not apply; publish the whole \
                 table, or start without --snapshot"
            )));
        }
        estimate += row.get::<_, f64>(1).max(0.0) as u64;
        let table = QualifiedName::new(&s.namespace, &s.relname).quoted();
        let list: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        // A partitioned root stands for its leaves (publish_via_partition_root); any other
        // table's stream carries its own rows only.
        let only = if kind == "p" { "" } else { "ONLY " };
        // In key order: the key's positions among the columns (the cursor's send forms).
        let key: Option<Vec<usize>> = in_key_order.then(|| {
            s.identity
                .as_ref()
                .map(|def| {
                    def.fields
                        .iter()
                        .filter_map(|f| columns.iter().position(|c| *c == f.column))
                        .collect()
                })
                .unwrap_or_default()
        });
        let order = match &key {
            Some(positions) => format!(
                " ORDER BY {}",
                positions
                    .iter()
                    .map(|&i| list[i].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => String::new(),
        };
        plans.push((
            s,
            key,
            format!(
                "COPY (SELECT {} FROM {only}{table}{order}) TO STDOUT (FORMAT binary)",
                list.join(", ")
            ),
        ));
    }
    let mut report = Report::new(progress, plans.len(), estimate);
    let mut keyless_done = false;
    for (done, (s, key, statement)) in plans.iter().enumerate() {
        if key.is_some() && !keyless_done {
            pipe.snapshot_end().map_err(CdcError::Pipeline)?;
            keyless_done = true;
        }
        let name = s.qualified_name();
        report.table_start(&name, done);
        let stream = tx.copy_out(statement.as_str()).await?;
        let mut stream = std::pin::pin!(stream);
        let mut reader = CopyReader::new(s.columns.len(), name.clone());
        let mut row = SendRow::new();
        let mut checkpoint = Instant::now();
        while let Some(chunk) = stream.next().await.transpose().map_err(CdcError::from)? {
            reader.push(chunk);
            while reader.row_into(&mut row)? {
                report.row(&name, done);
                match key {
                    // The clock is read once every 4096 rows (as the progress line's).
                    Some(positions)
                        if report.rows.is_multiple_of(CLOCK_EVERY)
                            && checkpoint.elapsed() >= checkpoint_every =>
                    {
                        let after = pipe
                            .snapshot_row_cursor(consistent, ts, s.relid, &mut row, positions)
                            .map_err(CdcError::Pipeline)?;
                        pipe.snapshot_checkpoint(s.relid, Some(after), false)
                            .map_err(CdcError::Pipeline)?;
                        checkpoint = Instant::now();
                    }
                    _ => {
                        pipe.snapshot_row(consistent, ts, s.relid, &mut row)
                            .map_err(CdcError::Pipeline)?;
                    }
                }
            }
        }
        reader.finish()?;
        if key.is_some() {
            pipe.snapshot_checkpoint(s.relid, None, true)
                .map_err(CdcError::Pipeline)?;
        }
        report.table_done();
    }
    if !keyless_done {
        pipe.snapshot_end().map_err(CdcError::Pipeline)?;
    }
    tx.commit().await?;
    report.last();
    Ok(report.rows)
}

/// Where the tables' latest committed identity schemas are read, outside the copy's snapshot.
pub struct Latest<'a> {
    /// A connection of its own (read committed).
    pub client: &'a Client,
    /// The OID of the identity schema table the start checks authenticated.
    pub identity_table: u32,
    /// The slot and the state file, for the fix a refusal names.
    pub slot: &'a str,
    /// The state file.
    pub state: &'a std::path::Path,
}

impl Latest<'_> {
    /// Refuses when a table's latest committed identity schema is not its schema at the
    /// consistent point (asked once the copy holds its locks: a DDL committed between the
    /// slot's creation and the locks).
    async fn check_unchanged(&self, tables: &[&RelationSchema]) -> Result<(), CdcError> {
        let name =
            super::checks::trusted_identity_table(self.client, self.identity_table, "--snapshot")
                .await?
                .quoted();
        let relids: Vec<u32> = tables.iter().map(|s| s.relid).collect();
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT s.relid, s.schema FROM {name} s \
                     WHERE s.relid OPERATOR(pg_catalog.=) ANY($1)"
                ),
                &[&relids],
            )
            .await?;
        for s in tables {
            let now = rows
                .iter()
                .find(|r| r.get::<_, u32>(0) == s.relid)
                .map(|r| r.get::<_, String>(1));
            let unchanged = super::checks::is_schema(now.as_deref(), s);
            if !unchanged {
                return Err(setup(format!(
                    "--snapshot: {} changed (a DDL committed) after the slot's consistent \
                     point and before its copy could lock it, so its rows would not be in the \
                     shape of that point; nothing of it was copied. Start over: SELECT \
                     pg_drop_replication_slot('{}'); remove {} and the sink's output; run \
                     again with --create-slot --snapshot",
                    s.qualified_name(),
                    self.slot,
                    self.state.display()
                )));
            }
        }
        Ok(())
    }
}

/// The current time in PostgreSQL's microseconds since 2000-01-01 UTC.
fn now_pg_micros() -> i64 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    unix - PG_EPOCH_UNIX_SECS * 1_000_000
}

/// Rows of a binary COPY, from chunks as they arrive. Everything is checked: the
/// signature, every row's field count against the table's columns, every length against
/// the bytes that follow; a malformed stream is an error naming the table, never a guess.
///
/// A row is the chunk it arrived in, its values ranges of it (PostgreSQL sends a row per
/// message: nothing is copied, and no handle is taken per value); only a row split across
/// chunks is put together first.
struct CopyReader {
    /// Unread bytes of whole chunks.
    buf: Bytes,
    /// A row (or the header) still incomplete, as far as it arrived.
    partial: BytesMut,
    columns: usize,
    table: String,
    header: bool,
    ended: bool,
}

impl CopyReader {
    fn new(columns: usize, table: String) -> CopyReader {
        CopyReader {
            buf: Bytes::new(),
            partial: BytesMut::new(),
            columns,
            table,
            header: false,
            ended: false,
        }
    }

    fn push(&mut self, chunk: Bytes) {
        if self.buf.is_empty() && self.partial.is_empty() {
            self.buf = chunk;
            return;
        }
        if !self.buf.is_empty() {
            self.partial.extend_from_slice(&self.buf);
            self.buf = Bytes::new();
        }
        self.partial.extend_from_slice(&chunk);
    }

    fn bad(&self, what: &str) -> CdcError {
        setup(format!(
            "--snapshot: the COPY of {} is malformed: {what}",
            self.table
        ))
    }

    /// The header's length at the start of `bytes`; `None`: not all of it arrived.
    fn header_len(&self, bytes: &[u8]) -> Result<Option<usize>, CdcError> {
        if bytes.len() < SIGNATURE.len() + 8 {
            return Ok(None);
        }
        if &bytes[..SIGNATURE.len()] != SIGNATURE {
            return Err(self.bad("no binary COPY signature"));
        }
        let ext = u32::from_be_bytes([bytes[15], bytes[16], bytes[17], bytes[18]]);
        let need = (SIGNATURE.len() + 8).saturating_add(ext as usize);
        Ok((bytes.len() >= need).then_some(need))
    }

    /// Walks the item after the header at the start of `bytes` (a row or the end marker),
    /// handing each of a row's fields to `field` (its byte range, `None` for NULL) as it is
    /// found in bounds; `None`: not all of it arrived (some fields may have been handed).
    fn walk(
        &self,
        bytes: &[u8],
        mut field: impl FnMut(Option<Range<usize>>),
    ) -> Result<Option<Item>, CdcError> {
        let Some(count) = bytes.get(..2) else {
            return Ok(None);
        };
        let count = i16::from_be_bytes([count[0], count[1]]);
        if count == -1 {
            return Ok(Some(Item::End));
        }
        if usize::try_from(count).ok() != Some(self.columns) {
            return Err(self.bad(&format!(
                "a row of {count} fields, the table has {} columns",
                self.columns
            )));
        }
        let mut at = 2usize;
        for _ in 0..self.columns {
            let Some(len) = bytes.get(at..at + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            at += 4;
            match len {
                -1 => field(None),
                n if n < 0 => return Err(self.bad("a negative field length")),
                n => {
                    let end = at.saturating_add(n as usize);
                    if bytes.len() < end {
                        return Ok(None);
                    }
                    field(Some(at..end));
                    at = end;
                }
            }
        }
        Ok(Some(Item::Row(at)))
    }

    /// Keeps the unread bytes of the last chunk (an incomplete item) until the next.
    fn stash(&mut self) {
        if !self.buf.is_empty() {
            self.partial.extend_from_slice(&self.buf);
            self.buf = Bytes::new();
        }
    }

    /// Reads the next complete row into `row` (its previous values replaced), walking it
    /// once; `false` until more bytes arrive, and after the end marker.
    fn row_into(&mut self, row: &mut SendRow) -> Result<bool, CdcError> {
        loop {
            if self.ended {
                return Ok(false);
            }
            if !self.partial.is_empty() {
                // An item split across chunks: parsed once it is whole.
                let whole = if self.header {
                    self.walk(&self.partial, |_| {})?.is_some()
                } else {
                    self.header_len(&self.partial)?.is_some()
                };
                if !whole {
                    return Ok(false);
                }
                self.buf = self.partial.split().freeze();
            }
            if !self.header {
                let Some(len) = self.header_len(&self.buf)? else {
                    self.stash();
                    return Ok(false);
                };
                self.buf.advance(len);
                self.header = true;
                continue;
            }
            // The values are ranges of the row's bytes, found in bounds by the walk.
            row.begin();
            let mut wide = false;
            let item = self.walk(&self.buf, |range| wide |= !row.push_field(range))?;
            if wide {
                return Err(self.bad("a row past 4 GiB"));
            }
            match item {
                Some(Item::Row(len)) => {
                    // PostgreSQL sends a row per message: the row takes the message whole.
                    let data = if len == self.buf.len() {
                        std::mem::take(&mut self.buf)
                    } else {
                        self.buf.split_to(len)
                    };
                    if !row.finish(data) {
                        return Err(self.bad("a value outside its row"));
                    }
                    return Ok(true);
                }
                Some(Item::End) => {
                    row.begin();
                    self.buf.advance(2);
                    self.ended = true;
                    return Ok(false);
                }
                None => {
                    row.begin();
                    self.stash();
                    return Ok(false);
                }
            }
        }
    }

    /// The stream ended: it must have ended with the end marker and nothing after it.
    fn finish(&self) -> Result<(), CdcError> {
        if !self.ended {
            return Err(self.bad("it ended without the end marker"));
        }
        if !self.buf.is_empty() || !self.partial.is_empty() {
            return Err(self.bad("bytes after the end marker"));
        }
        Ok(())
    }
}

/// What follows the header in a binary COPY.
enum Item {
    /// A row of this many bytes.
    Row(usize),
    /// The end marker (two bytes).
    End,
}

/// Rows between two looks at the clock for the progress line.
const CLOCK_EVERY: u64 = 4096;

/// The snapshot's progress line.
struct Report {
    enabled: bool,
    tables: usize,
    tables_done: usize,
    estimate: u64,
    rows: u64,
    started: Instant,
    last: Instant,
}

impl Report {
    fn new(enabled: bool, tables: usize, estimate: u64) -> Report {
        let now = Instant::now();
        Report {
            enabled,
            tables,
            tables_done: 0,
            estimate,
            rows: 0,
            started: now,
            last: now,
        }
    }

    fn row(&mut self, table: &str, index: usize) {
        self.rows += 1;
        // The clock is read once every 4096 rows: per row it cost 5% of the copy (perf).
        if self.enabled
            && self.rows.is_multiple_of(CLOCK_EVERY)
            && self.last.elapsed() >= Duration::from_secs(1)
        {
            self.line(table, index);
        }
    }

    /// A table's copy begins: its line, however soon after the last one (every table is
    /// named, also in a copy faster than a second).
    fn table_start(&mut self, table: &str, index: usize) {
        if self.enabled {
            self.line(table, index);
        }
    }

    fn line(&mut self, table: &str, index: usize) {
        self.last = Instant::now();
        let rate = self.rows as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        let eta = self.estimate.saturating_sub(self.rows) as f64 / rate.max(1.0);
        eprintln!(
            "rowid-cdc: snapshot: {} rows ({rate:.0}/s), {} of {} tables done, now {table} \
             ({} of {}); about {} rows in all, ETA {eta:.0} s",
            self.rows,
            self.tables_done,
            self.tables,
            index + 1,
            self.tables,
            self.estimate
        );
    }

    fn table_done(&mut self) {
        self.tables_done += 1;
    }

    fn last(&self) {
        if self.enabled {
            eprintln!(
                "rowid-cdc: snapshot: {} rows of {} tables in {:.2} s",
                self.rows,
                self.tables,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_bytes(rows: &[Vec<Option<&[u8]>>]) -> Vec<u8> {
        let mut b = SIGNATURE.to_vec();
        b.extend(0u32.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        for r in rows {
            b.extend((r.len() as i16).to_be_bytes());
            for f in r {
                match f {
                    None => b.extend((-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend((v.len() as i32).to_be_bytes());
                        b.extend(*v);
                    }
                }
            }
        }
        b.extend((-1i16).to_be_bytes());
        b
    }

    #[test]
    fn rows_arrive_whole_whatever_the_chunks() {
        let bytes = copy_bytes(&[
            vec![Some(&[0, 0, 0, 1][..]), None],
            vec![Some(&[0, 0, 0, 2][..]), Some(b"xy")],
        ]);
        for chunk in [1, 3, 7, bytes.len()] {
            let mut r = CopyReader::new(2, "t".into());
            let mut rows = Vec::new();
            let mut row = SendRow::new();
            for c in bytes.chunks(chunk) {
                r.push(Bytes::copy_from_slice(c));
                while r.row_into(&mut row).unwrap_or_else(|e| panic!("{e}")) {
                    let values: Vec<Option<Vec<u8>>> = (0..row.len())
                        .map(|i| row.get(i).flatten().map(<[u8]>::to_vec))
                        .collect();
                    rows.push(values);
                }
            }
            r.finish().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                rows,
                vec![
                    vec![Some(vec![0, 0, 0, 1]), None],
                    vec![Some(vec![0, 0, 0, 2]), Some(b"xy".to_vec())],
                ],
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn malformed_copies_are_refused_by_table() {
        let good = copy_bytes(&[vec![Some(&[1][..])]]);
        let mut row = SendRow::new();
        let mut r = CopyReader::new(2, "public.t".into());
        r.push(Bytes::copy_from_slice(&good));
        let err = r.row_into(&mut row).expect_err("one field for two columns");
        assert!(err.to_string().contains("public.t"), "{err}");
        let mut r = CopyReader::new(1, "t".into());
        r.push(Bytes::from_static(b"NOTCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0"));
        assert!(r.row_into(&mut row).is_err());
        let mut r = CopyReader::new(1, "t".into());
        r.push(Bytes::copy_from_slice(&good[..good.len() - 2]));
        assert!(r.row_into(&mut row).is_ok_and(|read| read));
        assert!(r.finish().is_err(), "no end marker");
        let mut negative = good.clone();
        let at = SIGNATURE.len() + 8 + 2;
        negative[at..at + 4].copy_from_slice(&(-5i32).to_be_bytes());
        let mut r = CopyReader::new(1, "t".into());
        r.push(Bytes::copy_from_slice(&negative));
        assert!(r.row_into(&mut row).is_err());
    }
}
