//! The progress line: at most once a second, on stderr; changes and their rate, how many had
//! no identity, notices, the durable position and the lag in bytes behind the server.

use std::time::{Duration, Instant};

use crate::pipeline::Progress as Counters;

/// The progress line's state.
pub struct Progress {
    enabled: bool,
    last: Instant,
    last_changes: u64,
    /// The highest WAL position the server reported.
    pub server_end: u64,
}

impl Progress {
    /// A progress line, printed only when `enabled`.
    pub fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            last: Instant::now(),
            last_changes: 0,
            server_end: 0,
        }
    }

    /// Prints the line if a second passed since the last one (always when `last`).
    pub fn line(&mut self, p: Counters, last: bool) {
        let elapsed = self.last.elapsed();
        if !self.enabled || (!last && elapsed < Duration::from_secs(1)) {
            return;
        }
        let rate = (p.changes - self.last_changes) as f64 / elapsed.as_secs_f64().max(1e-3);
        let peak = if last {
            peak_rss_kib().map_or(String::new(), |k| format!(", peak RSS {} KiB", k))
        } else {
            String::new()
        };
        eprintln!(
            "rowid-cdc: {} changes ({rate:.0}/s), {} unidentified, {} notices, {} transactions \
             durable up to {}, lag {} bytes{peak}",
            p.changes,
            p.unidentified,
            p.notices,
            p.transactions,
            p.durable,
            self.server_end.saturating_sub(p.durable.0)
        );
        self.last = Instant::now();
        self.last_changes = p.changes;
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
