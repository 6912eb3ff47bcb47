//! The scheduler (spec/stream-tables.md §8): background workers that refresh stream tables
//! on their `schedule`.
//!
//! With the library in `shared_preload_libraries`, a launcher starts with the server and
//! starts one scheduler per database that can be connected to; a scheduler whose database
//! has no `pg_trickle_ext` stops. `create_stream_table` and `alter_stream_table` with a
//! schedule start their database's scheduler when none runs. Each scheduler holds a session
//! lock on its database no SQL statement can take ([`crate::locks`]), so that one runs per
//! database however it was started, and each tick it reads the catalog, asks `rowid_ivm::schedule::plan` which
//! stream tables are due, and refreshes them in dependency order, each in its own
//! transaction: a failure is rolled back, recorded (`pgt_stream_tables.last_error`,
//! `consecutive_failures`, `pgt_refresh_history`) and reported in the server log, and the
//! table backs off while the others go on. Its `pg_stat_activity` row has `backend_type`
//! `pg_trickle scheduler` and, while it refreshes, the stream table in `query`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::datum::DatumWithOid;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use rowid_ivm::schedule::{Entry, Schedule};

use crate::spi;

/// `pg_trickle.enabled`: whether schedulers refresh anything.
pub static ENABLED: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `pg_trickle.scheduler_interval_ms`: the longest a scheduler sleeps between ticks.
pub static SCHEDULER_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);
/// `pg_trickle.min_schedule_seconds`: the shortest interval a schedule may give.
pub static MIN_SCHEDULE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(1);
/// `pg_trickle.max_workers`: the most database schedulers the launcher starts.
pub static MAX_WORKERS: GucSetting<i32> = GucSetting::<i32>::new(8);

/// `pg_trickle.scheduler_lock_timeout`: the longest a scheduled refresh waits for a lock.
pub static SCHEDULER_LOCK_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
/// What `pg_stat_activity.backend_type` shows for a scheduler.
pub const WORKER_TYPE: &str = "pg_trickle scheduler";
/// A refresh history keeps this many rows per stream table.
const HISTORY_ROWS: i64 = 100;

/// Whether the library was loaded by `shared_preload_libraries` (set in the postmaster,
/// inherited by every backend it starts).
static PRELOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Defines the settings and, while the server loads `shared_preload_libraries`, registers
/// the launcher (from `_PG_init`).
pub fn init() {
    GucRegistry::define_bool_guc(
        c"pg_trickle.enabled",
        c"Whether the pg_trickle schedulers refresh stream tables",
        c"Off: every scheduler idles; refresh_stream_table still works.",
        &ENABLED,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_trickle.scheduler_interval_ms",
        c"The longest a pg_trickle scheduler sleeps between two looks at its stream tables",
        c"A scheduler also wakes when the next stream table comes due.",
        &SCHEDULER_INTERVAL_MS,
        10,
        60_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_trickle.scheduler_lock_timeout",
        c"The longest a scheduled refresh waits for a lock before it fails and backs off",
        c"The scheduler goes on with the other stream tables; a refresh by hand waits as \
          long as lock_timeout says.",
        &SCHEDULER_LOCK_TIMEOUT_MS,
        1,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_trickle.min_schedule_seconds",
        c"The shortest interval a stream table's schedule may give",
        c"create_stream_table refuses a shorter one; the scheduler stretches older ones.",
        &MIN_SCHEDULE_SECONDS,
        1,
        86_400,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    // SAFETY: a flag the postmaster sets while loading shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        PRELOADED.store(true, std::sync::atomic::Ordering::Relaxed);
        GucRegistry::define_int_guc(
            c"pg_trickle.max_workers",
            c"The most database schedulers pg_trickle runs at once",
            c"Each uses a background worker slot (max_worker_processes).",
            &MAX_WORKERS,
            1,
            1024,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        BackgroundWorkerBuilder::new("pg_trickle launcher")
            .set_type("pg_trickle launcher")
            .set_library("pg_trickle_ext")
            .set_function("pg_trickle_launcher_main")
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(Some(Duration::from_secs(5)))
            .load();
    }
}

/// Starts the scheduler of the current database unless one runs (from `create_stream_table`
/// and `alter_stream_table` with a schedule). A scheduler started twice stops at once.
/// Without `shared_preload_libraries` no scheduler runs (none would after a restart): a
/// warning says so.
pub fn ensure_running() {
    if !PRELOADED.load(std::sync::atomic::Ordering::Relaxed) {
        pgrx::warning!(
            "pg_trickle: the schedule is recorded, but no scheduler runs: add pg_trickle_ext \
             to shared_preload_libraries and restart the server"
        );
        return;
    }
    if !ENABLED.get() {
        return;
    }
    let running: Option<bool> = spi::one(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity \
           WHERE backend_type OPERATOR(pg_catalog.=) $1 \
             AND datid OPERATOR(pg_catalog.=) $2)",
        &[
            DatumWithOid::from(WORKER_TYPE),
            // SAFETY: the backend's database, set at connection.
            DatumWithOid::from(unsafe { pg_sys::MyDatabaseId }),
        ],
    );
    if running != Some(true) {
        if self::running() >= i64::from(MAX_WORKERS.get().max(1)) {
            pgrx::warning!(
                "pg_trickle: pg_trickle.max_workers schedulers run already; this database's \
                 stream tables are not scheduled until one stops"
            );
            return;
        }
        // SAFETY: as above.
        start(unsafe { pg_sys::MyDatabaseId }, true);
    }
}

/// Registers the scheduler of `database`; `requested` by a stream table function (it then
/// waits for that transaction to commit before giving up on a database without the
/// extension). A full worker table is reported, not raised.
fn start(database: pg_sys::Oid, requested: bool) -> bool {
    let started =
        BackgroundWorkerBuilder::new(&format!("pg_trickle scheduler {}", u32::from(database)))
            .set_type(WORKER_TYPE)
            .set_library("pg_trickle_ext")
            .set_function("pg_trickle_scheduler_main")
            .set_argument(Some(pg_sys::Datum::from(u32::from(database))))
            .set_extra(if requested { "requested" } else { "launched" })
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(Some(Duration::from_secs(5)))
            .load_dynamic()
            .is_ok();
    if !started {
        pgrx::warning!(
            "pg_trickle: no background worker slot for the scheduler of database {} \
             (max_worker_processes)",
            u32::from(database)
        );
    }
    started
}

/// The launcher: once the server accepts connections, starts a scheduler for every
/// database that allows connections, as long as fewer than `pg_trickle.max_workers` run
/// (those without the extension stop at once), and every ten seconds for the databases it
/// has not started one for yet (a database created since, or one that found no free slot).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_trickle_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(Some("postgres"), None);
    let mut started: BTreeSet<u32> = BTreeSet::new();
    let mut wait_for = Duration::ZERO;
    while wait(wait_for) {
        wait_for = Duration::from_secs(10);
        if BackgroundWorker::sighup_received() {
            // SAFETY: reloads the configuration in this worker, as PostgreSQL's own do.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if !ENABLED.get() {
            continue;
        }
        for db in transaction(databases) {
            if started.contains(&db) {
                continue;
            }
            if transaction(running) >= MAX_WORKERS.get().max(1) as i64 {
                break;
            }
            if start(pg_sys::Oid::from(db), false) {
                started.insert(db);
                // Its look at the database takes a moment: one at a time.
                if !wait(Duration::from_millis(200)) {
                    break;
                }
            }
        }
    }
    // As the scheduler: exit 1, so that a terminated launcher is started again (a shutdown
    // starts nothing again).
    // SAFETY: ends this worker.
    unsafe { pg_sys::proc_exit(1) };
}

/// Waits on the latch up to `timeout`; `false` once the server asked this worker to stop.
///
/// pgrx's `sigterm_received` clears the flag it reads, so a wait whose answer was ignored
/// (the launcher's pause after starting a scheduler), or a check inside a tick, swallowed a
/// SIGTERM: the worker went on, and `pg_ctl stop -m fast` waited for it until a second one.
/// PostgreSQL's own `ShutdownRequestPending`, which pgrx's handler also sets, stays set.
fn wait(timeout: Duration) -> bool {
    if shutdown_requested() {
        return false;
    }
    BackgroundWorker::wait_latch(Some(timeout));
    !shutdown_requested()
}

/// Whether the server asked this worker to stop (SIGTERM: a shutdown, `pg_terminate_backend`).
fn shutdown_requested() -> bool {
    // SAFETY: a `sig_atomic_t` PostgreSQL's and pgrx's SIGTERM handlers set; read volatile.
    unsafe { (&raw const pg_sys::ShutdownRequestPending).read_volatile() != 0 }
}

/// The databases that allow connections, by OID.
fn databases() -> Vec<u32> {
    spi::rows(
        "SELECT oid FROM pg_catalog.pg_database \
         WHERE datallowconn AND NOT datistemplate ORDER BY oid",
        &[],
        |r| {
            Ok(u32::from(
                r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
            ))
        },
    )
}

/// How many schedulers run now.
fn running() -> i64 {
    spi::one(
        "SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity \
         WHERE backend_type OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(WORKER_TYPE)],
    )
    .unwrap_or(0)
}

/// A database's scheduler: holds the database's scheduler lock (else stops), stops when
/// the database has no `pg_trickle_ext` (a scheduler requested by a stream table function
/// waits 30 seconds for it to commit), and otherwise ticks until the server stops it.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_trickle_scheduler_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = pg_sys::Oid::from(arg.value() as u32);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(database), None);
    let requested = BackgroundWorker::get_extra() == "requested";
    // One scheduler per database: a lock no SQL statement can take (crate::locks).
    if !transaction(|| crate::locks::try_lock_scheduler(database)) {
        pgrx::log!(
            "pg_trickle: the scheduler of database {} runs already; this one stops",
            u32::from(database)
        );
        // SAFETY: ends this worker; exit code 0 unregisters it.
        unsafe { pg_sys::proc_exit(0) };
    }
    let mut without_extension = 0u32;
    let mut wait_for = Duration::ZERO;
    while wait(wait_for) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: as in the launcher.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let interval = Duration::from_millis(SCHEDULER_INTERVAL_MS.get().max(10) as u64);
        if !ENABLED.get() {
            wait_for = interval;
            continue;
        }
        let installed: bool = transaction(|| {
            spi::one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension \
                   WHERE extname OPERATOR(pg_catalog.=) 'pg_trickle_ext')",
                &[],
            )
            .unwrap_or(false)
        });
        if !installed {
            without_extension += 1;
            if !requested || without_extension > 30 {
                // SAFETY: as above.
                unsafe { pg_sys::proc_exit(0) };
            }
            wait_for = Duration::from_secs(1);
            continue;
        }
        without_extension = 0;
        let current: bool = transaction(|| {
            spi::one(
                "SELECT pg_catalog.to_regclass('pgtrickle.pgt_refresh_history') IS NOT NULL",
                &[],
            )
            .unwrap_or(false)
        });
        if !current {
            pgrx::warning!(
                "pg_trickle: database {} holds the catalog of an older pg_trickle_ext build; \
                 its stream tables are not scheduled until the extension is created again",
                u32::from(database)
            );
            // SAFETY: as above.
            unsafe { pg_sys::proc_exit(0) };
        }
        let next = tick();
        // SAFETY: the wall clock, as the catalog's now() reads it.
        let now = now_ms();
        wait_for = match next {
            Some(at) if at > now => interval.min(Duration::from_millis((at - now) as u64)),
            Some(_) => Duration::ZERO,
            None => interval,
        };
    }
    // Asked to stop: by a shutdown (PostgreSQL starts no worker again then), or by
    // pg_terminate_backend. A worker that exits 0 is forgotten; this one exits 1, so that
    // PostgreSQL starts it again after its restart time: no role can stop its database's
    // refreshes by terminating it.
    pgrx::log!(
        "pg_trickle: the scheduler of database {} was asked to stop; unless the server is \
         shutting down, it starts again in 5 s",
        u32::from(database)
    );
    // SAFETY: ends this worker (exit code 1: restarted after its restart time).
    unsafe { pg_sys::proc_exit(1) };
}

/// The current time in milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One tick: reads the catalog, refreshes what is due in dependency order, and returns
/// when the next stream table comes due.
fn tick() -> Option<i64> {
    // Each stream table as the planner sees it; `reads` holds every source for now.
    let rows: Vec<(u32, Entry)> = transaction(|| {
        spi::rows(
            "SELECT pgt_relid, schedule, refresh_mode, sources, \
                   (EXTRACT(epoch FROM last_refresh_at) OPERATOR(pg_catalog.*) 1000) \
                     ::pg_catalog.int8, \
                   consecutive_failures, \
                   (EXTRACT(epoch FROM last_failure_at) OPERATOR(pg_catalog.*) 1000) \
                     ::pg_catalog.int8 \
                 FROM pgtrickle.pgt_stream_tables",
            &[],
            |r| {
                let mode = r.get::<String>(3)?.unwrap_or_default();
                // IMMEDIATE stream tables are kept by every statement; a schedule this build
                // cannot read leaves the stream table to refreshes by hand.
                let schedule = r
                    .get::<String>(2)?
                    .filter(|_| mode != "IMMEDIATE")
                    .and_then(|s| rowid_ivm::schedule::parse(&s).ok());
                Ok((
                    u32::from(r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid)),
                    Entry {
                        schedule,
                        reads: r
                            .get::<Vec<pg_sys::Oid>>(4)?
                            .unwrap_or_default()
                            .into_iter()
                            .map(u32::from)
                            .collect(),
                        last_refresh_ms: r.get::<i64>(5)?.unwrap_or(i64::MIN),
                        failures: r.get::<i32>(6)?.unwrap_or(0).max(0) as u32,
                        last_failure_ms: r.get::<i64>(7)?,
                    },
                ))
            },
        )
    });
    let tables: BTreeSet<u32> = rows.iter().map(|r| r.0).collect();
    let entries: BTreeMap<u32, Entry> = rows
        .into_iter()
        .map(|(relid, mut entry)| {
            // What it reads among the stream tables.
            entry.reads.retain(|s| tables.contains(s));
            (relid, entry)
        })
        .collect();
    let min_ms = MIN_SCHEDULE_SECONDS.get().max(1) as u64 * 1000;
    let planned = rowid_ivm::schedule::plan(&entries, now_ms(), min_ms);
    for relid in planned.due {
        if shutdown_requested() {
            break;
        }
        refresh(pg_sys::Oid::from(relid));
    }
    planned.next_ms
}

/// Refreshes `relid` in a transaction of its own and records the outcome: its history row,
/// and its failures in a row (reset by a success). A failure is rolled back and reported
/// in the server log.
fn refresh(relid: pg_sys::Oid) {
    let Some(name) = transaction(|| {
        crate::stream_graph::upstream(relid).map(|_| crate::catalog::relation_name(relid))
    }) else {
        // Dropped since the tick read the catalog.
        return;
    };
    report_activity(Some(&format!("pg_trickle: refresh {name}")));
    let started = std::time::Instant::now();
    let started_at = now_ms();
    let timeout =
        CString::new(format!("{}ms", SCHEDULER_LOCK_TIMEOUT_MS.get().max(1))).unwrap_or_default();
    let outcome: Result<Option<i64>, (String, String)> =
        PgTryBuilder::new(AssertUnwindSafe(|| {
            Ok(transaction(|| {
                // A refresh running already (one by hand): this one waits for the next tick, and
                // the scheduler goes on with the others.
                if !crate::locks::try_lock_refresh(relid) {
                    return None;
                }
                // No lock wait holds the scheduler longer than this: the refresh fails, is
                // recorded and backs off, and the others go on.
                crate::guard::with_settings(&[(c"lock_timeout", timeout.as_c_str())], || {
                    Some(crate::stream_rebuild::refresh_scheduled(relid))
                })
            }))
        }))
        .catch_others(|e| {
            // SAFETY: the failed transaction is aborted as PostgreSQL's own workers do after an
            // error, back in the top memory context.
            unsafe {
                pg_sys::AbortCurrentTransaction();
                pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
            }
            let report = match &e {
                CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r,
                CaughtError::RustPanic { ereport, .. } => ereport,
            };
            Err((
                sqlstate(report.sql_error_code()),
                report.message().to_string(),
            ))
        })
        .execute();
    let outcome = match outcome {
        Ok(None) => {
            report_activity(None);
            return;
        }
        Ok(Some(rows)) => Ok(rows),
        // What is recorded and logged names no value the error quoted (rowid_ivm::report).
        Err((code, message)) => Err(transaction(|| {
            crate::catalog::as_extension(|| failure_text(relid, &code, &message))
        })),
    };
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if outcome.is_err() && transaction(|| crate::stream_graph::upstream(relid).is_none()) {
        // Dropped, or replaced by rebuild_stream_tables, while this refresh waited for it:
        // not a failure of any stream table there is.
        report_activity(None);
        return;
    }
    if let Err(message) = &outcome {
        pgrx::warning!("pg_trickle: the scheduled refresh of {name} failed: {message}");
    }
    transaction(|| {
        crate::guard::as_owner(crate::catalog::extension_owner(), || {
            record(relid, &name, started_at, ms, &outcome);
        });
    });
    report_activity(None);
}

/// The SQLSTATE of `code`, as its five characters.
fn sqlstate(code: PgSqlErrorCode) -> String {
    // SAFETY: formats an error code into a static buffer PostgreSQL owns; copied at once.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::unpack_sql_state(code as i32)) }
        .to_string_lossy()
        .into_owned()
}

/// What a failed refresh of `relid` records (its catalog row, its history, the log): the
/// message with every value it quotes replaced by its length and fingerprint, names of the
/// stream table and its sources (columns, tables, schemas, constraints) kept, and the
/// SQLSTATE.
fn failure_text(relid: pg_sys::Oid, code: &str, message: &str) -> String {
    let names: std::collections::HashSet<String> = spi::rows(
        "WITH r(oid) AS ( \
           SELECT $1 UNION \
           SELECT pg_catalog.unnest(t.sources) FROM pgtrickle.pgt_stream_tables t \
           WHERE t.pgt_relid OPERATOR(pg_catalog.=) $1) \
         SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a JOIN r \
           ON a.attrelid OPERATOR(pg_catalog.=) r.oid WHERE a.attnum OPERATOR(pg_catalog.>) 0 \
         UNION SELECT c.relname::pg_catalog.text FROM pg_catalog.pg_class c JOIN r \
           ON c.oid OPERATOR(pg_catalog.=) r.oid \
         UNION SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_class c JOIN r \
           ON c.oid OPERATOR(pg_catalog.=) r.oid \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         UNION SELECT n.nspname::pg_catalog.text OPERATOR(pg_catalog.||) '.' \
             OPERATOR(pg_catalog.||) c.relname::pg_catalog.text \
           FROM pg_catalog.pg_class c JOIN r ON c.oid OPERATOR(pg_catalog.=) r.oid \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         UNION SELECT k.conname::pg_catalog.text FROM pg_catalog.pg_constraint k JOIN r \
           ON k.conrelid OPERATOR(pg_catalog.=) r.oid",
        &[DatumWithOid::from(relid)],
        |r| Ok(r.get::<String>(1)?.unwrap_or_default()),
    )
    .into_iter()
    .collect();
    rowid_ivm::report::refresh_failure(code, message, |span| names.contains(span))
}

/// Records a scheduled refresh of `relid` (as the extension's owner).
fn record(relid: pg_sys::Oid, name: &str, started_at: i64, ms: f64, outcome: &Result<i64, String>) {
    let (rows, error) = match outcome {
        Ok(rows) => (Some(*rows), None),
        Err(message) => (None, Some(message.as_str())),
    };
    spi::run(
        "INSERT INTO pgtrickle.pgt_refresh_history \
           (pgt_relid, pgt_name, started_at, duration_ms, rows_changed, error) \
         VALUES ($1, $2, pg_catalog.to_timestamp($3::pg_catalog.float8 / 1000), $4, $5, $6)",
        &[
            DatumWithOid::from(relid),
            DatumWithOid::from(name),
            DatumWithOid::from(started_at),
            DatumWithOid::from(ms),
            DatumWithOid::from(rows),
            DatumWithOid::from(error),
        ],
    );
    spi::run(
        &format!(
            "DELETE FROM pgtrickle.pgt_refresh_history h \
             WHERE h.pgt_relid OPERATOR(pg_catalog.=) $1 AND h.started_at OPERATOR(pg_catalog.<) \
               (SELECT k.started_at FROM pgtrickle.pgt_refresh_history k \
                WHERE k.pgt_relid OPERATOR(pg_catalog.=) $1 \
                ORDER BY k.started_at DESC OFFSET {} LIMIT 1)",
            HISTORY_ROWS - 1
        ),
        &[DatumWithOid::from(relid)],
    );
    match error {
        None => spi::run(
            "UPDATE pgtrickle.pgt_stream_tables SET consecutive_failures = 0, last_error = NULL \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1 \
               AND consecutive_failures OPERATOR(pg_catalog.<>) 0",
            &[DatumWithOid::from(relid)],
        ),
        Some(message) => spi::run(
            "UPDATE pgtrickle.pgt_stream_tables \
             SET consecutive_failures = consecutive_failures OPERATOR(pg_catalog.+) 1, \
                 last_error = $2, last_failure_at = pg_catalog.now() \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid), DatumWithOid::from(message)],
        ),
    }
}

/// Shows `what` (or idle) in this worker's `pg_stat_activity` row.
fn report_activity(what: Option<&str>) {
    let text = CString::new(what.unwrap_or("")).unwrap_or_default();
    // SAFETY: a NUL-terminated string the call copies.
    unsafe {
        pg_sys::pgstat_report_activity(
            if what.is_some() {
                pg_sys::BackendState::STATE_RUNNING
            } else {
                pg_sys::BackendState::STATE_IDLE
            },
            if what.is_some() {
                text.as_ptr()
            } else {
                std::ptr::null()
            },
        );
    }
}

/// Runs `f` in a transaction of its own with a snapshot, committed after it.
fn transaction<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: a background worker connected to its database, between transactions.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = f();
    // SAFETY: the transaction started above, its snapshot pushed.
    unsafe {
        pg_sys::PopActiveSnapshot();
        pg_sys::CommitTransactionCommand();
    }
    result
}

/// The schedule `text` read for `create_stream_table` and `alter_stream_table`: refused by
/// name when it is not one, or when its interval is shorter than
/// `pg_trickle.min_schedule_seconds`.
pub fn check_schedule(function: &str, text: &str) -> Schedule {
    let schedule = rowid_ivm::schedule::parse(text)
        .unwrap_or_else(|e| crate::errors::invalid_argument(function, e.to_string()));
    let min = MIN_SCHEDULE_SECONDS.get().max(1) as u64;
    if let Schedule::Every(ms) = schedule
        && ms < min * 1000
    {
        crate::errors::invalid_argument(
            function,
            format!("schedule {text:?} is shorter than pg_trickle.min_schedule_seconds ({min} s)"),
        );
    }
    schedule
}
