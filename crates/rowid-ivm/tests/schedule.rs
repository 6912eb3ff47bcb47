//! The scheduler's arithmetic (spec/stream-tables.md §8) without a server: schedules read and
//! refused, cron expressions against instants computed with `date -u` (not by this code),
//! and the plan of a tick over a graph (dependency order, `calculated`, back-off).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use rowid_ivm::schedule::{Entry, MAX_BACKOFF_MS, Schedule, Tick, dependency_order, parse, plan};

/// `date -u -d '2026-12-06 14:02:30 UTC' +%s`, in milliseconds.
const NOW: i64 = 1_796_565_750_000;

#[test]
fn intervals_and_keywords() {
    for (text, ms) in [
        ("2s", 2_000),
        ("5m", 300_000),
        ("1h30m", 5_400_000),
        ("1d", 86_400_000),
        (" 10s ", 10_000),
    ] {
        assert_eq!(parse(text), Ok(Schedule::Every(ms)), "{text}");
    }
    assert_eq!(parse("calculated"), Ok(Schedule::Calculated));
    assert_eq!(parse("CALCULATED"), Ok(Schedule::Calculated));
    for bad in [
        "",
        "0s",
        "5",
        "s",
        "5x",
        "1.5s",
        "-1s",
        "99999999999999999999s",
        "1 2 3",
    ] {
        let err = parse(bad).expect_err(bad);
        assert!(err.0.contains(&format!("{bad:?}")), "{bad}: {err}");
    }
}

#[test]
fn cron_expressions_against_date() {
    let next = |expr: &str| match parse(expr).unwrap() {
        Schedule::Cron(c) => c.next_after(NOW).map(|ms| ms / 1000),
        other => panic!("{expr}: {other:?}"),
    };
    // date -u -d '2026-12-06 14:05 UTC' +%s
    assert_eq!(next("*/5 * * * *"), Some(1_796_565_900));
    // 2026-12-06 15:00
    assert_eq!(next("@hourly"), Some(1_796_569_200));
    assert_eq!(next("0 * * * *"), Some(1_796_569_200));
    // 2027-01-01 00:00
    assert_eq!(next("@yearly"), Some(1_798_761_600));
    // 2028-02-29 00:00: the next 29 February
    assert_eq!(next("0 0 29 2 *"), Some(1_835_395_200));
    // 2026-12-07 09:00, a Monday (the 6th is a Sunday)
    assert_eq!(next("0 9 * * 1-5"), Some(1_796_634_000));
    // Both day fields restricted: the 13th or a Friday, whichever comes first (Friday
    // 2026-12-11 00:00; the 13th is a Sunday).
    assert_eq!(next("0 0 13 * 5"), Some(1_796_947_200));
    // Sunday as 7: the next Sunday midnight, 2026-12-13 00:00.
    assert_eq!(next("0 0 * * 7"), next("0 0 * * 0"));
    assert_eq!(next("0 0 30 2 *"), None);
    for bad in [
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "5-1 * * * *",
        "@fortnightly",
        "* * * *  x",
    ] {
        assert!(parse(bad).is_err(), "{bad} was accepted");
    }
}

fn entry(schedule: Option<Schedule>, reads: &[u32], last: i64) -> Entry {
    Entry {
        schedule,
        reads: reads.to_vec(),
        last_refresh_ms: last,
        failures: 0,
        last_failure_ms: None,
    }
}

#[test]
fn a_tick_refreshes_what_is_due_after_what_it_reads() {
    let second = Some(Schedule::Every(1_000));
    // 10 reads 20 (calculated) reads 30 (every second, refreshed just now); 40 reads 10 and
    // is manual; 50 is every second and due, reading nothing.
    let mut g: BTreeMap<u32, Entry> = BTreeMap::new();
    g.insert(10, entry(second.clone(), &[20], NOW - 5_000));
    g.insert(20, entry(Some(Schedule::Calculated), &[30], NOW - 5_000));
    g.insert(30, entry(second.clone(), &[], NOW - 200));
    g.insert(40, entry(None, &[10], 0));
    g.insert(50, entry(second.clone(), &[], NOW - 1_000));
    let tick = plan(&g, NOW, 1_000);
    // 30 is not due (refreshed 200 ms ago) but comes due in 800 ms.
    assert_eq!(
        tick,
        Tick {
            due: vec![20, 50, 10],
            next_ms: Some(NOW + 800)
        }
    );
    // The minimum interval stretches a shorter schedule.
    g.insert(50, entry(Some(Schedule::Every(100)), &[], NOW - 500));
    assert!(!plan(&g, NOW, 1_000).due.contains(&50));
    assert!(plan(&g, NOW, 100).due.contains(&50));
    // Never refreshed (created without initialize): due at once, an interval or a cron.
    let mut fresh = BTreeMap::new();
    fresh.insert(7, entry(Some(Schedule::Every(60_000)), &[], i64::MIN));
    fresh.insert(8, entry(Some(parse("@daily").unwrap()), &[], i64::MIN));
    assert_eq!(plan(&fresh, NOW, 1_000).due, vec![7, 8]);
    // A cron table refreshed at its last time comes due at its next one.
    fresh.insert(
        8,
        entry(Some(parse("*/5 * * * *").unwrap()), &[], NOW - 150_000),
    );
    fresh.insert(7, entry(None, &[], 0));
    assert_eq!(
        plan(&fresh, NOW, 1_000),
        Tick {
            due: vec![],
            // 2026-12-06 14:05:00
            next_ms: Some(1_796_565_900_000)
        }
    );
    // A calculated table read by nothing scheduled is never due on its own.
    let mut lone = BTreeMap::new();
    lone.insert(1, entry(Some(Schedule::Calculated), &[], 0));
    assert_eq!(
        plan(&lone, NOW, 1_000),
        Tick {
            due: vec![],
            next_ms: None
        }
    );
}

#[test]
fn a_failing_stream_table_backs_off_without_holding_the_others() {
    let mut g: BTreeMap<u32, Entry> = BTreeMap::new();
    let mut failing = entry(Some(Schedule::Every(1_000)), &[], NOW - 10_000);
    failing.failures = 3;
    failing.last_failure_ms = Some(NOW - 1_000);
    g.insert(1, failing.clone());
    g.insert(2, entry(Some(Schedule::Every(1_000)), &[1], NOW - 2_000));
    let tick = plan(&g, NOW, 1_000);
    // Three failures in a row: 2^3 times its interval after the last attempt.
    assert_eq!(tick.due, vec![2]);
    assert_eq!(tick.next_ms, Some(NOW - 1_000 + 8_000));
    // A failing calculated upstream waits too; its due reader goes on alone.
    let mut upstream = entry(Some(Schedule::Calculated), &[], NOW - 10_000);
    upstream.failures = 2;
    upstream.last_failure_ms = Some(NOW - 1_000);
    let mut calc: BTreeMap<u32, Entry> = BTreeMap::new();
    calc.insert(1, upstream.clone());
    calc.insert(2, entry(Some(Schedule::Every(1_000)), &[1], NOW - 2_000));
    assert_eq!(plan(&calc, NOW, 1_000).due, vec![2]);
    // 2^2 s after its last attempt it is refreshed before its reader again.
    upstream.last_failure_ms = Some(NOW - 4_000);
    calc.insert(1, upstream);
    assert_eq!(plan(&calc, NOW, 1_000).due, vec![1, 2]);
    // Never longer than the cap.
    failing.failures = 40;
    g.insert(1, failing);
    assert_eq!(
        plan(&g, NOW, 1_000).next_ms,
        Some(NOW - 1_000 + MAX_BACKOFF_MS)
    );
}

#[test]
fn dependency_order_puts_every_upstream_first() {
    // 1 <- 2 <- 3, 1 <- 4 <- 3 (a diamond), 5 alone.
    let mut g: BTreeMap<u32, Entry> = BTreeMap::new();
    g.insert(3, entry(None, &[2, 4], 0));
    g.insert(2, entry(None, &[1], 0));
    g.insert(4, entry(None, &[1], 0));
    g.insert(1, entry(None, &[], 0));
    g.insert(5, entry(None, &[], 0));
    let all: BTreeSet<u32> = g.keys().copied().collect();
    assert_eq!(dependency_order(&g, &all), vec![1, 5, 2, 4, 3]);
    // Only some of them: the others do not hold them back.
    let some: BTreeSet<u32> = [3, 1].into();
    assert_eq!(dependency_order(&g, &some), vec![1, 3]);
}
