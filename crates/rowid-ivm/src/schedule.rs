//! When a stream table is refreshed by the scheduler (spec/stream-tables.md §8): its
//! `schedule` read (an interval, a cron expression, or `calculated`), and the plan of one
//! scheduler tick: which stream tables are due, in dependency order, and when to look again.
//!
//! Times are milliseconds since the Unix epoch; cron expressions are evaluated in UTC.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A schedule, as `create_stream_table(..., schedule => ...)` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every so many milliseconds after the last refresh (`'2s'`, `'5m'`, `'1h30m'`).
    Every(u64),
    /// At the minutes a cron expression names (`'*/5 * * * *'`, `'@hourly'`).
    Cron(Cron),
    /// As often as the stream tables that read it are refreshed: just before them.
    Calculated,
}

/// Why a schedule text is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError(pub String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

/// Reads `text`: `calculated`; an interval of one or more `<number><unit>` (`s`, `m`, `h`,
/// `d`), such as `2s`, `5m` or `1h30m`; a cron expression of five fields (minute, hour, day
/// of month, month, day of week: `*`, numbers, ranges `a-b`, steps `*/n` or `a-b/n`, lists
/// `a,b`; Sunday is 0 or 7) or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`
/// (`@annually`).
pub fn parse(text: &str) -> Result<Schedule, ScheduleError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("calculated") {
        return Ok(Schedule::Calculated);
    }
    if t.starts_with('@') || t.split_whitespace().count() == 5 {
        return Cron::parse(t).map(Schedule::Cron);
    }
    interval(t).map(Schedule::Every).ok_or_else(|| {
        ScheduleError(format!(
            "schedule {text:?} is not an interval ('2s', '5m', '1h30m'), a cron expression \
             of five fields ('*/5 * * * *', '@hourly') or 'calculated'"
        ))
    })
}

/// `2s`, `5m`, `1h30m`, `1d`: milliseconds, or `None`.
fn interval(t: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut rest = t;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let ms = match &rest[..unit] {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit..];
        total = total.checked_add(n.checked_mul(ms)?)?;
    }
    (total > 0).then_some(total)
}

/// A cron expression: the allowed values of each field, as bit sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Both day fields restricted: a day matches either (cron's rule).
    either_day: bool,
}

impl Cron {
    /// Reads a five-field expression or an `@` shorthand.
    pub fn parse(text: &str) -> Result<Cron, ScheduleError> {
        let expanded = match text.to_ascii_lowercase().as_str() {
            "@hourly" => "0 * * * *".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            s if s.starts_with('@') => {
                return Err(ScheduleError(format!("unknown cron shorthand {text:?}")));
            }
            _ => text.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(ScheduleError(format!(
                "cron expression {text:?} has {} fields; it needs five (minute hour day month \
                 weekday)",
                fields.len()
            )));
        };
        let field = |f: &str, name: &str, lo: u32, hi: u32| {
            bits(f, lo, hi)
                .ok_or_else(|| ScheduleError(format!("cron expression {text:?}: bad {name} {f:?}")))
        };
        let weekdays = field(weekday, "weekday", 0, 7)?;
        // Sunday is 0 and 7.
        let weekdays = ((weekdays | (weekdays >> 7)) & 0x7f) as u8;
        Ok(Cron {
            minutes: field(minute, "minute", 0, 59)?,
            hours: field(hour, "hour", 0, 23)? as u32,
            days: field(day, "day of month", 1, 31)? as u32,
            months: field(month, "month", 1, 12)? as u16,
            weekdays,
            either_day: !day.starts_with('*') && !weekday.starts_with('*'),
        })
    }

    /// The first minute strictly after `after_ms` that the expression names (UTC), in
    /// milliseconds, or `None` when none comes within eight years (`0 0 30 2 *`).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let mut minute = after_ms.div_euclid(60_000) + 1;
        let last = minute + 8 * 366 * 24 * 60;
        while minute < last {
            let days = minute.div_euclid(1440);
            let (month, day) = month_and_day(days);
            let weekday = (days + 4).rem_euclid(7) as u32; // 1970-01-01 was a Thursday
            let in_month = self.months & (1 << month) != 0;
            let day_ok = {
                let dom = self.days & (1 << day) != 0;
                let dow = self.weekdays & (1 << weekday) != 0;
                if self.either_day {
                    dom || dow
                } else {
                    dom && dow
                }
            };
            if !(in_month && day_ok) {
                minute = (days + 1) * 1440;
                continue;
            }
            let hour = (minute.rem_euclid(1440) / 60) as u32;
            if self.hours & (1 << hour) == 0 {
                minute = (minute.div_euclid(60) + 1) * 60;
                continue;
            }
            let m = minute.rem_euclid(60) as u32;
            if self.minutes & (1 << m) != 0 {
                return Some(minute * 60_000);
            }
            minute += 1;
        }
        None
    }
}

/// The values a cron field allows, as bits `lo..=hi`, or `None`.
fn bits(field: &str, lo: u32, hi: u32) -> Option<u64> {
    let mut out = 0u64;
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (a.parse().ok()?, b.parse().ok()?)
        } else {
            let a: u32 = range.parse().ok()?;
            // `a/n`: from a to the end.
            (a, if part.contains('/') { hi } else { a })
        };
        if a < lo || b > hi || a > b {
            return None;
        }
        let mut v = a;
        while v <= b {
            out |= 1 << v;
            v += step;
        }
    }
    Some(out)
}

/// The month (1-12) and day (1-31) of `days` since 1970-01-01, proleptic Gregorian (Howard
/// Hinnant's `civil_from_days`; `rowid-codec` has it behind its `send` feature, which this
/// crate does not need otherwise).
fn month_and_day(days: i64) -> (u32, u32) {
    let z = days + 719_468;
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (month, day)
}

/// What the scheduler knows of one stream table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its schedule (`None`: refreshed only by hand).
    pub schedule: Option<Schedule>,
    /// The stream tables it reads (by the key of `plan`'s map).
    pub reads: Vec<u32>,
    /// When it was last refreshed successfully, or created.
    pub last_refresh_ms: i64,
    /// Its failures in a row since the last success.
    pub failures: u32,
    /// When the last failed attempt began.
    pub last_failure_ms: Option<i64>,
}

/// The longest a failing stream table waits before its next attempt.
pub const MAX_BACKOFF_MS: i64 = 600_000;

/// One tick's plan: the stream tables due now, every one after those it reads, and when
/// the next one comes due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    /// Due now, in dependency order (an upstream before its readers).
    pub due: Vec<u32>,
    /// The earliest time a stream table not due now comes due (`None`: none is scheduled).
    pub next_ms: Option<i64>,
}

/// When `entry`, by its own schedule, comes due: `None` for `calculated` and manual ones.
/// A cron schedule never refreshed (or last a year ago) is due at its first time after a
/// year before `now_ms`, that is at once.
fn own_due(entry: &Entry, now_ms: i64, min_interval_ms: u64) -> Option<i64> {
    const YEAR_MS: i64 = 366 * 86_400_000;
    let due = match entry.schedule.as_ref()? {
        Schedule::Every(ms) => entry
            .last_refresh_ms
            .saturating_add((*ms).max(min_interval_ms) as i64),
        Schedule::Cron(cron) => {
            cron.next_after(entry.last_refresh_ms.max(now_ms.saturating_sub(YEAR_MS)))?
        }
        Schedule::Calculated => return None,
    };
    let base = due.saturating_sub(entry.last_refresh_ms);
    Some(due.max(backoff_until(entry, base, min_interval_ms)))
}

/// Until when a failing `entry` waits: after each failure in a row, twice as long as its
/// interval `base_ms` (at least the minimum interval), at most [`MAX_BACKOFF_MS`] after the
/// last failed attempt; `i64::MIN` when it is not failing.
fn backoff_until(entry: &Entry, base_ms: i64, min_interval_ms: u64) -> i64 {
    match entry.last_failure_ms {
        Some(failed) if entry.failures > 0 => {
            let base = base_ms.max(min_interval_ms as i64).max(1_000);
            let wait = base
                .saturating_mul(1 << entry.failures.min(20))
                .min(MAX_BACKOFF_MS);
            failed.saturating_add(wait)
        }
        _ => i64::MIN,
    }
}

/// Plans a tick at `now_ms`: the stream tables whose schedule has come, the `calculated`
/// ones they read (through other `calculated` ones) unless those back off, all in
/// dependency order.
pub fn plan(entries: &BTreeMap<u32, Entry>, now_ms: i64, min_interval_ms: u64) -> Tick {
    let mut due: BTreeSet<u32> = BTreeSet::new();
    let mut next_ms: Option<i64> = None;
    for (&id, entry) in entries {
        match own_due(entry, now_ms, min_interval_ms) {
            Some(at) if at <= now_ms => {
                due.insert(id);
            }
            Some(at) => next_ms = Some(next_ms.map_or(at, |n| n.min(at))),
            None => {}
        }
    }
    // The calculated upstreams of what is due, transitively.
    let mut stack: Vec<u32> = due.iter().copied().collect();
    while let Some(id) = stack.pop() {
        for up in entries.get(&id).map(|e| e.reads.as_slice()).unwrap_or(&[]) {
            let Some(upstream) = entries.get(up) else {
                continue;
            };
            let backing_off = now_ms < backoff_until(upstream, 0, min_interval_ms);
            if upstream.schedule == Some(Schedule::Calculated) && !backing_off && due.insert(*up) {
                stack.push(*up);
            }
        }
    }
    Tick {
        due: dependency_order(entries, &due),
        next_ms,
    }
}

/// `ids` ordered so that every stream table comes after the ones it reads (among `ids`);
/// ties by id. A cycle (refused at create) leaves its members in id order at the end.
pub fn dependency_order(entries: &BTreeMap<u32, Entry>, ids: &BTreeSet<u32>) -> Vec<u32> {
    let mut out = Vec::with_capacity(ids.len());
    let mut placed: BTreeSet<u32> = BTreeSet::new();
    loop {
        let ready: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|id| !placed.contains(id))
            .filter(|id| {
                entries.get(id).is_none_or(|e| {
                    e.reads
                        .iter()
                        .all(|r| !ids.contains(r) || placed.contains(r) || r == id)
                })
            })
            .collect();
        if ready.is_empty() {
            break;
        }
        for id in ready {
            placed.insert(id);
            out.push(id);
        }
    }
    out.extend(ids.iter().copied().filter(|id| !placed.contains(id)));
    out
}
