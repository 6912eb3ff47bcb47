//! What the run has done so far, for whoever reports it while it runs (the metrics endpoint,
//! `--metrics`): the changes and transactions the sink made durable, by relation and
//! operation, where the run stands in the WAL, the snapshot's tables, reconnections and
//! refusals. Without I/O: the pipeline and the stream loop write it, a reader takes a copy.
//!
//! Changes count once they are durable, not when they reach the sink: a transaction a lost
//! connection makes the run deliver again is counted once, as the sink holds it once. The
//! pipeline keeps a transaction's counts to itself until the sink made it durable
//! ([`PendingChanges`]) and publishes them then, one lock per durable commit, never one per
//! change.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::event::Op;
use crate::lsn::Lsn;

/// The counters as of the last durable commit (and the stream's last report of the server).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Changes the sink made durable, by relation (`schema.name` at the change's position)
    /// and operation; snapshot rows as [`Op::Snapshot`], changes without identity as
    /// [`Op::Unidentified`].
    pub changes: BTreeMap<(Arc<str>, Op), u64>,
    /// The stream's transactions the sink made durable (snapshot rows are not transactions).
    pub transactions: u64,
    /// The end of the last durable transaction, or the later position recorded while idle:
    /// where a restart resumes.
    pub durable: Lsn,
    /// The highest WAL position the server reported.
    pub server_end: Lsn,
    /// When the last transaction became durable (this machine's clock).
    pub last_commit: Option<SystemTime>,
    /// Tables of the snapshot (initial copy and chunks) done, and in all.
    pub snapshot_tables: (u64, u64),
    /// Times the run lost a connection (the replication stream's or the sink's) and started
    /// again from the durable position.
    pub reconnects: u64,
    /// Notices (unauthenticated identity messages, malformed schema rows, a stream abort of
    /// a transaction never sent).
    pub notices: u64,
    /// Changes that stopped the run instead of being delivered (`--strict`: no identity;
    /// `--require-complete`: an incomplete after-image).
    pub refused: u64,
    /// Publications a sink sent and its server has not acknowledged yet (the NATS sink; 0
    /// for the others), as of the copy.
    pub acks_pending: u64,
}

impl Counters {
    /// Snapshot rows made durable, over every relation.
    pub fn snapshot_rows(&self) -> u64 {
        self.changes
            .iter()
            .filter(|((_, op), _)| *op == Op::Snapshot)
            .map(|(_, n)| n)
            .sum()
    }

    /// Bytes of WAL the server reported beyond the durable position.
    pub fn lag_bytes(&self) -> u64 {
        self.server_end.0.saturating_sub(self.durable.0)
    }
}

/// [`Counters`] shared between the run (writing) and a reporter (reading); cheap to clone.
/// The acknowledgements a sink awaits change with every publication: they are an atomic of
/// their own, which the sink's thread sets without the lock.
#[derive(Clone, Debug, Default)]
pub struct SharedCounters(Arc<Mutex<Counters>>, Arc<AtomicU64>);

impl SharedCounters {
    /// New counters, all zero.
    pub fn new() -> SharedCounters {
        SharedCounters::default()
    }

    /// A copy of the counters as they are now.
    pub fn snapshot(&self) -> Counters {
        let mut c = self.lock().clone();
        c.acks_pending = self.1.load(Ordering::Relaxed);
        c
    }

    /// Where a sink keeps the number of its publications awaiting acknowledgement.
    pub fn acks_pending(&self) -> Arc<AtomicU64> {
        self.1.clone()
    }

    /// The counters, for an update. A writer that panicked while holding them left nothing
    /// half-written that matters more than the counts themselves: the lock is taken anyway.
    pub fn lock(&self) -> MutexGuard<'_, Counters> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The server reported WAL up to `end`.
    pub fn server_at(&self, end: Lsn) {
        let mut c = self.lock();
        c.server_end = c.server_end.max(end);
    }

    /// The run lost a connection and starts again from the durable position.
    pub fn reconnected(&self) {
        self.lock().reconnects += 1;
    }
}

/// Changes delivered to the sink and not durable yet, by relation and operation: a handful of
/// entries per transaction (the last one is tried first: consecutive changes of one table and
/// operation cost one comparison).
#[derive(Debug, Default)]
pub struct PendingChanges {
    entries: Vec<(u32, Op, Arc<str>, u64)>,
}

impl PendingChanges {
    /// One change of relation `relid` (named `relation`), operation `op`.
    pub fn add(&mut self, relid: u32, relation: &Arc<str>, op: Op) {
        if let Some(last) = self.entries.last_mut()
            && last.0 == relid
            && last.1 == op
        {
            last.3 += 1;
            return;
        }
        match self
            .entries
            .iter_mut()
            .find(|(r, o, _, _)| *r == relid && *o == op)
        {
            Some(entry) => entry.3 += 1,
            None => self.entries.push((relid, op, relation.clone(), 1)),
        }
    }

    /// The changes became durable: moved into `counters`.
    pub fn settle(&mut self, counters: &mut Counters) {
        for (_, op, relation, n) in self.entries.drain(..) {
            *counters.changes.entry((relation, op)).or_default() += n;
        }
    }

    /// The changes will be delivered again (the sink was reopened at its durable position):
    /// forgotten.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes count only once settled, by relation and operation, and changes forgotten
    /// before settling (a lost connection) never count.
    #[test]
    fn changes_count_once_durable() {
        let t: Arc<str> = Arc::from("public.t");
        let u: Arc<str> = Arc::from("public.u");
        let mut pending = PendingChanges::default();
        let mut counters = Counters::default();
        pending.add(1, &t, Op::Insert);
        pending.add(1, &t, Op::Insert);
        pending.add(2, &u, Op::Delete);
        pending.add(1, &t, Op::Insert);
        pending.add(1, &t, Op::Update);
        assert!(counters.changes.is_empty());
        pending.settle(&mut counters);
        pending.add(2, &u, Op::Delete);
        pending.clear();
        pending.settle(&mut counters);
        let expected: BTreeMap<(Arc<str>, Op), u64> = [
            ((t.clone(), Op::Insert), 3),
            ((t.clone(), Op::Update), 1),
            ((u.clone(), Op::Delete), 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(counters.changes, expected);
    }

    /// Snapshot rows are summed over relations; the lag never goes below zero.
    #[test]
    fn snapshot_rows_and_lag() {
        let mut counters = Counters::default();
        counters
            .changes
            .insert((Arc::from("public.t"), Op::Snapshot), 5);
        counters
            .changes
            .insert((Arc::from("public.u"), Op::Snapshot), 7);
        counters
            .changes
            .insert((Arc::from("public.u"), Op::Insert), 100);
        assert_eq!(counters.snapshot_rows(), 12);
        counters.durable = Lsn(200);
        counters.server_end = Lsn(150);
        assert_eq!(counters.lag_bytes(), 0);
        counters.server_end = Lsn(1200);
        assert_eq!(counters.lag_bytes(), 1000);
    }
}
