//! The initial snapshot (`--snapshot`): every published table's rows as of the slot's
//! consistent point, read under the snapshot the slot exported, before the stream's first
//! change. Rows are read with binary `COPY`, so each value arrives in its send form, the same
//! bytes pgoutput's binary tuples carry: identities and images come from the same code as the
//! stream's (the union of the snapshot and the stream is the table at every later position).
//!
//! The exported snapshot lives only until the replication connection's next command, so the
//! copy cannot resume after a crash: the state file records it pending first, and a restart
//! refuses, naming the fix ([`crate::state::SnapshotState`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use rowid_pgoutput::{Column, Tuple};
use rowid_registry::schema_message::RelationSchema;
use rowid_registry::sql::{QualifiedName, quote_ident};
use tokio_postgres::Client;

use crate::error::{CdcError, setup};
use crate::lsn::Lsn;
use crate::pipeline::Pipeline;
use crate::sink::Sink;

/// The binary COPY signature (`PGCOPY\n\377\r\n\0`).
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Seconds between 1970-01-01 and 2000-01-01.
const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;

/// Copies every table of `schemas` into `pipe` under the exported snapshot `snapshot`;
/// returns the number of rows. `progress`: a line on stderr at most once a second.
pub async fn copy(
    client: &mut Client,
    snapshot: &str,
    publication: &str,
    consistent: Lsn,
    schemas: &[RelationSchema],
    pipe: &mut Pipeline<Box<dyn Sink>>,
    progress: bool,
) -> Result<u64, CdcError> {
    let tx = super::slot::at_snapshot(client, snapshot).await?;
    let ts = now_pg_micros();
    let mut estimate = 0u64;
    let mut plans = Vec::with_capacity(schemas.len());
    for s in schemas {
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
        plans.push((
            s,
            format!(
                "COPY (SELECT {} FROM {only}{table}) TO STDOUT (FORMAT binary)",
                list.join(", ")
            ),
        ));
    }
    let mut report = Report::new(progress, plans.len(), estimate);
    for (done, (s, statement)) in plans.iter().enumerate() {
        let name = s.qualified_name();
        let stream = tx.copy_out(statement.as_str()).await?;
        let mut stream = std::pin::pin!(stream);
        let mut reader = CopyReader::new(s.columns.len(), name.clone());
        while let Some(chunk) = stream.next().await.transpose().map_err(CdcError::from)? {
            reader.push(&chunk);
            while let Some(row) = reader.row()? {
                pipe.snapshot_row(consistent, ts, s.relid, &row)
                    .map_err(CdcError::Pipeline)?;
                report.row(&name, done);
            }
        }
        reader.finish()?;
        report.table_done();
    }
    tx.commit().await?;
    report.last();
    Ok(report.rows)
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
struct CopyReader {
    buf: BytesMut,
    columns: usize,
    table: String,
    header: bool,
    ended: bool,
}

impl CopyReader {
    fn new(columns: usize, table: String) -> CopyReader {
        CopyReader {
            buf: BytesMut::new(),
            columns,
            table,
            header: false,
            ended: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    fn bad(&self, what: &str) -> CdcError {
        setup(format!(
            "--snapshot: the COPY of {} is malformed: {what}",
            self.table
        ))
    }

    /// The next complete row, `None` until more bytes arrive (or after the end marker).
    fn row(&mut self) -> Result<Option<Tuple>, CdcError> {
        if !self.header {
            if self.buf.len() < SIGNATURE.len() + 8 {
                return Ok(None);
            }
            if &self.buf[..SIGNATURE.len()] != SIGNATURE {
                return Err(self.bad("no binary COPY signature"));
            }
            let ext = u32::from_be_bytes([self.buf[15], self.buf[16], self.buf[17], self.buf[18]]);
            let need = SIGNATURE.len() + 8 + ext as usize;
            if self.buf.len() < need {
                return Ok(None);
            }
            self.buf.advance(need);
            self.header = true;
        }
        if self.ended || self.buf.len() < 2 {
            return Ok(None);
        }
        let count = i16::from_be_bytes([self.buf[0], self.buf[1]]);
        if count == -1 {
            self.buf.advance(2);
            self.ended = true;
            return Ok(None);
        }
        if usize::try_from(count).ok() != Some(self.columns) {
            return Err(self.bad(&format!(
                "a row of {count} fields, the table has {} columns",
                self.columns
            )));
        }
        // Measure the whole row before taking anything.
        let mut at = 2;
        for _ in 0..self.columns {
            let Some(len) = self.buf.get(at..at + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            at += 4;
            match len {
                -1 => {}
                n if n < 0 => return Err(self.bad("a negative field length")),
                n => {
                    at += n as usize;
                    if self.buf.len() < at {
                        return Ok(None);
                    }
                }
            }
        }
        let mut row_bytes: Bytes = self.buf.split_to(at).freeze();
        row_bytes.advance(2);
        let mut row = Vec::with_capacity(self.columns);
        for _ in 0..self.columns {
            let len = row_bytes.get_i32();
            if len == -1 {
                row.push(Column::Null);
            } else {
                row.push(Column::Binary(row_bytes.split_to(len as usize)));
            }
        }
        Ok(Some(row))
    }

    /// The stream ended: it must have ended with the end marker and nothing after it.
    fn finish(&self) -> Result<(), CdcError> {
        if !self.ended {
            return Err(self.bad("it ended without the end marker"));
        }
        if !self.buf.is_empty() {
            return Err(self.bad("bytes after the end marker"));
        }
        Ok(())
    }
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
            for c in bytes.chunks(chunk) {
                r.push(c);
                while let Some(row) = r.row().unwrap_or_else(|e| panic!("{e}")) {
                    rows.push(row);
                }
            }
            r.finish().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                rows,
                vec![
                    vec![
                        Column::Binary(Bytes::from_static(&[0, 0, 0, 1])),
                        Column::Null
                    ],
                    vec![
                        Column::Binary(Bytes::from_static(&[0, 0, 0, 2])),
                        Column::Binary(Bytes::from_static(b"xy"))
                    ],
                ],
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn malformed_copies_are_refused_by_table() {
        let good = copy_bytes(&[vec![Some(&[1][..])]]);
        let mut r = CopyReader::new(2, "public.t".into());
        r.push(&good);
        let err = r.row().expect_err("one field for two columns");
        assert!(err.to_string().contains("public.t"), "{err}");
        let mut r = CopyReader::new(1, "t".into());
        r.push(b"NOTCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0");
        assert!(r.row().is_err());
        let mut r = CopyReader::new(1, "t".into());
        r.push(&good[..good.len() - 2]);
        assert!(r.row().is_ok_and(|row| row.is_some()));
        assert!(r.finish().is_err(), "no end marker");
        let mut negative = good.clone();
        let at = SIGNATURE.len() + 8 + 2;
        negative[at..at + 4].copy_from_slice(&(-5i32).to_be_bytes());
        let mut r = CopyReader::new(1, "t".into());
        r.push(&negative);
        assert!(r.row().is_err());
    }
}
