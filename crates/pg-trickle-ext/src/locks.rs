//! The locks that serialise refreshes, rebuilds and schedulers (spec/stream-tables.md §10.7,
//! issue 47 requirement 7): locks no SQL statement can take.
//!
//! Advisory locks are open to every role (`pg_advisory_lock(7366516, oid)` stalled the
//! scheduler behind one stream table; `pg_advisory_lock(7366517, dboid)` kept a restarted
//! scheduler from starting). These are PostgreSQL object locks (`LOCKTAG_OBJECT`) of class
//! `pg_extension` with an `objsubid` PostgreSQL never uses for an extension (it locks an
//! extension as a whole, `objsubid` 0): no command of PostgreSQL takes them, and no SQL
//! function can; only this library does. `pg_locks` shows them as `object` locks with
//! `classid` `pg_extension`:
//!
//! | lock | `objid` | `objsubid` | mode, scope |
//! |---|---|---|---|
//! | a stream table's refreshes | its OID | 1 | exclusive, transaction |
//! | `rebuild_stream_tables` | 0 | 2 | exclusive, transaction |
//! | the database's scheduler | the database's OID | 3 | exclusive, session (user lock method) |
//!
//! A refresh by hand waits for the one running (as before); the scheduler only tries, and a
//! stream table another refresh holds waits for the next tick while the others go on.

use pgrx::pg_sys;

/// `objsubid` of a stream table's refresh lock.
const REFRESH: u16 = 1;
/// `objsubid` of the rebuild lock.
const REBUILD: u16 = 2;
/// `objsubid` of the scheduler lock.
const SCHEDULER: u16 = 3;

/// The tag of lock `subid` on `objid`, of lock method `method`.
fn tag(objid: pg_sys::Oid, subid: u16, method: u32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: the backend's database, set at connection.
        locktag_field1: u32::from(unsafe { pg_sys::MyDatabaseId }),
        locktag_field2: u32::from(pg_sys::ExtensionRelationId),
        locktag_field3: u32::from(objid),
        locktag_field4: subid,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: method as u8,
    }
}

/// Takes the lock; `wait`: until it is free (else `false` when another holds it).
fn acquire(tag: &pg_sys::LOCKTAG, session: bool, wait: bool) -> bool {
    // SAFETY: a lock of the default lock method on a tag of this database; a transaction
    // lock is released at the transaction's end, a session lock at the backend's exit.
    let result = unsafe {
        pg_sys::LockAcquire(
            tag,
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
            session,
            !wait,
        )
    };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Serialises the refreshes of stream table `relid` until the transaction ends, waiting for
/// the one running.
pub fn lock_refresh(relid: pg_sys::Oid) {
    acquire(
        &tag(relid, REFRESH, pg_sys::DEFAULT_LOCKMETHOD),
        false,
        true,
    );
}

/// [`lock_refresh`] without waiting: `false` when another refresh of `relid` holds it.
pub fn try_lock_refresh(relid: pg_sys::Oid) -> bool {
    acquire(
        &tag(relid, REFRESH, pg_sys::DEFAULT_LOCKMETHOD),
        false,
        false,
    )
}

/// Serialises rebuilds of every stream table until the transaction ends.
pub fn lock_rebuild() {
    acquire(
        &tag(pg_sys::InvalidOid, REBUILD, pg_sys::DEFAULT_LOCKMETHOD),
        false,
        true,
    );
}

/// The scheduler lock of database `database`, for this backend's life; `false` when another
/// scheduler holds it.
pub fn try_lock_scheduler(database: pg_sys::Oid) -> bool {
    // Of the user lock method: PostgreSQL releases a backend's session locks of that method
    // when it exits (ShutdownPostgres), and only transaction locks of the default one (a
    // default-method session lock outlived its scheduler, held by its recycled PGPROC: the
    // next process there failed "lock ... is already held", and another scheduler ran
    // beside it). Advisory locks use the same method with another tag type, which no
    // advisory lock function can give this tag.
    acquire(
        &tag(database, SCHEDULER, pg_sys::USER_LOCKMETHOD),
        true,
        false,
    )
}
