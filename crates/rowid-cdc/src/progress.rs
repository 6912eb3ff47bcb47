//! The progress line: at most once a second, on stderr; changes and their rate, how many had
//! no identity, notices, the durable position and the lag in bytes behind the server.

use std::time::{Duration, Instant};

use crate::pipeline::Progress as Counters;

/// The progress line's state.
pub struct Progress {
    enabled: bool,
    /// When the run's first line could have been printed, and its changes then.
    started: Instant,
    /// When the last line was printed, and the changes it counted.
    last: Instant,
    last_changes: u64,
    /// The highest WAL position the server reported.
    pub server_end: u64,
}

impl Progress {
    /// A progress line, printed only when `enabled`.
    pub fn new(enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            enabled,
            started: now,
            last: now,
            last_changes: 0,
            server_end: 0,
        }
    }

    /// Prints the line if a second passed since the last one (always when `last`).
    pub fn line(&mut self, p: Counters, last: bool) {
        if let Some(text) = self.text(&p, last, Instant::now()) {
            let peak = if last {
                peak_rss_kib().map_or(String::new(), |k| format!(", peak RSS {k} KiB"))
            } else {
                String::new()
            };
            eprintln!("{text}{peak}");
        }
    }

    /// The line due at `now`, if one is. A line during the run gives the rate since the line
    /// before it; the last line gives the run's average rate: the time since the line before
    /// it may be a few microseconds, and a rate over it says nothing (it printed
    /// "120519463/s" once).
    fn text(&mut self, p: &Counters, last: bool, now: Instant) -> Option<String> {
        let since_line = now.saturating_duration_since(self.last);
        if !self.enabled || (!last && since_line < Duration::from_secs(1)) {
            return None;
        }
        let (changes, over) = if last {
            (p.changes, now.saturating_duration_since(self.started))
        } else {
            (p.changes.saturating_sub(self.last_changes), since_line)
        };
        let rate = changes as f64 / over.as_secs_f64().max(1e-3);
        let rate_of = if last { "on average" } else { "now" };
        self.last = now;
        self.last_changes = p.changes;
        Some(format!(
            "rowid-cdc: {} changes ({rate:.0}/s {rate_of}), {} unidentified, {} notices, {} \
             transactions durable up to {}, lag {} bytes",
            p.changes,
            p.unidentified,
            p.notices,
            p.transactions,
            p.durable,
            self.server_end.saturating_sub(p.durable.0)
        ))
    }
}

/// The process's peak resident set size (`VmHWM`), where /proc has it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The chunked snapshot's progress line, at most once a second and at the first chunk of each
/// table (however fast the one before went, every table is named): rows read in chunks by this
/// run and their rate, tables done, and for the table being read its estimated rows left
/// (`pg_class.reltuples` less the rows this run read of it) and the time they would take.
pub struct ChunkProgress {
    enabled: bool,
    started: Instant,
    last: Instant,
    rows: u64,
    /// Rows this run read per table.
    per_table: std::collections::HashMap<u32, u64>,
    finished: bool,
}

impl ChunkProgress {
    /// A chunk progress line, printed only when `enabled`.
    pub fn new(enabled: bool) -> ChunkProgress {
        let now = Instant::now();
        ChunkProgress {
            enabled,
            started: now,
            last: now - Duration::from_secs(1),
            rows: 0,
            per_table: std::collections::HashMap::new(),
            finished: false,
        }
    }

    /// A chunk of `rows` rows of table `relid` (`name`, `estimate` rows in all when known)
    /// was read; `done` of `tables` tables are done. Prints the line when it is due.
    pub fn chunk(
        &mut self,
        relid: u32,
        name: &str,
        rows: usize,
        estimate: Option<u64>,
        tables: (usize, usize),
    ) {
        if let Some(line) = self.chunk_line(relid, name, rows, estimate, tables) {
            eprintln!("{line}");
        }
    }

    /// [`ChunkProgress::chunk`]'s counting, and its line when one is due.
    fn chunk_line(
        &mut self,
        relid: u32,
        name: &str,
        rows: usize,
        estimate: Option<u64>,
        (done, tables): (usize, usize),
    ) -> Option<String> {
        self.rows += rows as u64;
        let read = self.per_table.entry(relid).or_insert(0);
        let first = *read == 0;
        *read += rows as u64;
        if !self.enabled || (!first && self.last.elapsed() < Duration::from_secs(1)) {
            return None;
        }
        self.last = Instant::now();
        let rate = self.rows as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        let left = match estimate {
            Some(e) => {
                let left = e.saturating_sub(*read);
                format!(
                    "; about {left} rows of it left, ETA {:.0} s",
                    left as f64 / rate.max(1.0)
                )
            }
            None => String::new(),
        };
        Some(format!(
            "rowid-cdc: snapshot: {} rows in chunks ({rate:.0}/s), {done} of {tables} tables \
             done, now {name}{left}",
            self.rows
        ))
    }

    /// Whether the last line may still be due (asked before counting the tables).
    pub fn waiting(&self) -> bool {
        self.enabled && !self.finished && self.rows > 0
    }

    /// Prints the last line once every chunked table is done (`done` of `tables`).
    pub fn tables(&mut self, (done, tables): (usize, usize)) {
        if self.waiting() && tables > 0 && done == tables {
            self.finished = true;
            eprintln!(
                "rowid-cdc: snapshot: {} rows of {tables} tables in chunks in {:.2} s",
                self.rows,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_named_at_its_first_chunk_however_fast() {
        let mut p = ChunkProgress::new(true);
        let first = p.chunk_line(1, "public.a", 0, Some(0), (0, 2));
        assert!(
            first.is_some_and(|l| l.ends_with("now public.a; about 0 rows of it left, ETA 0 s"))
        );
        // Within the same second: the next table's first chunk still has its line, the
        // chunks after it wait for the second to pass.
        let second = p.chunk_line(2, "public.b", 100, Some(1000), (1, 2));
        assert!(
            second
                .as_deref()
                .is_some_and(|l| l.contains("100 rows in chunks (")
                    && l.contains("1 of 2 tables done, now public.b; about 900 rows of it left")),
            "{second:?}"
        );
        assert_eq!(p.chunk_line(2, "public.b", 100, Some(1000), (1, 2)), None);
        assert!(
            ChunkProgress::new(false)
                .chunk_line(1, "public.a", 5, None, (0, 1))
                .is_none()
        );
    }

    #[test]
    fn the_last_line_gives_the_runs_average_rate() {
        let mut p = Progress::new(true);
        let t0 = p.started;
        let counters = |changes| Counters {
            changes,
            ..Counters::default()
        };
        // Not a second yet: no line during the run.
        assert_eq!(
            p.text(&counters(10), false, t0 + Duration::from_millis(500)),
            None
        );
        let during = p
            .text(&counters(3000), false, t0 + Duration::from_secs(2))
            .unwrap();
        assert!(during.contains("3000 changes (1500/s now)"), "{during}");
        // The last line 1 us after that one: 1000 more changes in 2 s and 1 us of run.
        let last = p
            .text(&counters(4000), true, t0 + Duration::from_micros(2_000_001))
            .unwrap();
        assert!(last.contains("4000 changes (2000/s on average)"), "{last}");
        assert!(Progress::new(false).text(&counters(1), true, t0).is_none());
    }
}
