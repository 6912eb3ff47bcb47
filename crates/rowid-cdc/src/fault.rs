//! Named points where a test can crash the process or hold it, so that the windows between
//! two durable steps (a sink's commit and the state file's, a chunk's delivery and its
//! watermark, a chunk's read and the commits around it) are tested as they happen, with the
//! real binary, instead of by chance.
//!
//! - `ROWID_CDC_TEST_CRASH=POINT` or `POINT#N`: the process aborts (`SIGABRT`, no unwinding,
//!   nothing flushed: a crash) the first (the `N`th) time it passes `POINT`.
//! - `ROWID_CDC_TEST_PAUSE=POINT:FILE`: at `POINT` the process waits until `FILE` exists, then
//!   removes it and goes on (every time it passes there).
//! - `ROWID_CDC_TEST_NATS_NO_IDS=1`: the NATS sink publishes without message ids, so that a
//!   test can show that its exactly-once check sees the duplicates ids prevent
//!   ([`nats_message_ids`]).
//!
//! None of these variables is read by anything but this module, and each is read once.
//! Without them a point costs one load of a flag. The points are [`Point`]'s.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A point of the process a test can crash or hold it at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// A transaction (or a group, or a chunk at its watermark) is durable in the sink, and the
    /// state file does not record it yet.
    AfterSinkCommit,
    /// The state file recorded a transaction during which a chunk was delivered (at the first
    /// change its snapshot did not see), and the chunk's watermark has not arrived.
    AfterChunkDelivered,
    /// A chunk is about to be read (its snapshot not taken yet); the stream waits meanwhile.
    BeforeChunkRead,
    /// The NATS sink has every change of a transaction acknowledged and has not published its
    /// commit marker.
    BeforeNatsCommitMarker,
}

impl Point {
    /// The name the environment variables use.
    pub fn name(self) -> &'static str {
        match self {
            Point::AfterSinkCommit => "after-sink-commit",
            Point::AfterChunkDelivered => "after-chunk-delivered",
            Point::BeforeChunkRead => "before-chunk-read",
            Point::BeforeNatsCommitMarker => "before-nats-commit-marker",
        }
    }
}

/// What the environment asked for, read once.
struct Asked {
    /// The point, and at which of its passes (from 1).
    crash: Option<(String, u64)>,
    pause: Option<(String, PathBuf)>,
}

fn asked() -> &'static Asked {
    static ASKED: OnceLock<Asked> = OnceLock::new();
    ASKED.get_or_init(|| Asked {
        crash: std::env::var("ROWID_CDC_TEST_CRASH")
            .ok()
            .map(|v| match v.split_once('#') {
                Some((point, n)) => (point.to_string(), n.parse().unwrap_or(1)),
                None => (v, 1),
            }),
        pause: std::env::var("ROWID_CDC_TEST_PAUSE").ok().and_then(|v| {
            let (point, file) = v.split_once(':')?;
            Some((point.to_string(), PathBuf::from(file)))
        }),
    })
}

/// Passes `point`: aborts or waits there when a test asked for it.
pub fn at(point: Point) {
    let asked = asked();
    if asked.crash.is_none() && asked.pause.is_none() {
        return;
    }
    if let Some((name, nth)) = &asked.crash
        && name == point.name()
    {
        static PASSES: AtomicU64 = AtomicU64::new(0);
        if PASSES.fetch_add(1, Ordering::Relaxed) + 1 == *nth {
            eprintln!("rowid-cdc: test crash at {} (pass {nth})", point.name());
            std::process::abort();
        }
    }
    if let Some((name, file)) = &asked.pause
        && name == point.name()
    {
        eprintln!(
            "rowid-cdc: test pause at {} until {}",
            point.name(),
            file.display()
        );
        while !file.exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(file);
    }
}

/// Whether the NATS sink gives its messages ids (always, unless a test turned them off to
/// show what they prevent).
pub fn nats_message_ids() -> bool {
    static IDS: OnceLock<bool> = OnceLock::new();
    *IDS.get_or_init(|| std::env::var_os("ROWID_CDC_TEST_NATS_NO_IDS").is_none())
}
