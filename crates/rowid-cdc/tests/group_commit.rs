//! Group commit through the pipeline, deterministically (no server): a sink that holds
//! transactions for a later commit ([`Sink::end_transaction`] returning `None`) is never
//! reported durable before that commit: no position to acknowledge, the state file (and the
//! state a reconnection resumes from) still at the last durable transaction, until
//! [`Pipeline::flush`] or a position reported between transactions commits the group.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod pipeline_kit;

use std::io;
use std::sync::{Arc, Mutex};

use pipeline_kit::{Stream, insert, state};
use rowid_cdc::sink::{Durable, Sink};
use rowid_cdc::state::State;
use rowid_cdc::{ChangeEvent, Lsn};

/// What the sink saw: changes since its last commit, and the changes each commit made
/// durable.
#[derive(Default)]
struct Seen {
    open: usize,
    commits: Vec<usize>,
    /// Each coverage the sink was given, with how many commits it had made by then.
    covered: Vec<(Lsn, usize)>,
}

/// A sink that groups every transaction until it is told to commit.
#[derive(Clone, Default)]
struct Grouping(Arc<Mutex<Seen>>);

impl Sink for Grouping {
    fn change(&mut self, _event: &ChangeEvent) -> io::Result<()> {
        self.0.lock().unwrap().open += 1;
        Ok(())
    }
    fn commit(&mut self) -> io::Result<Durable> {
        let mut seen = self.0.lock().unwrap();
        let n = std::mem::take(&mut seen.open);
        seen.commits.push(n);
        Ok(Durable::default())
    }
    fn end_transaction(&mut self) -> io::Result<Option<Durable>> {
        Ok(None)
    }
    fn durable(&self) -> Durable {
        Durable::default()
    }
    fn covered(&mut self, lsn: Lsn) -> io::Result<()> {
        let mut seen = self.0.lock().unwrap();
        let commits = seen.commits.len();
        seen.covered.push((lsn, commits));
        Ok(())
    }
}

/// A state file of the test's own.
fn state_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rowid-cdc-group-commit-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("state.json")
}

fn on_disk(path: &std::path::Path) -> Lsn {
    State::load(path).unwrap().unwrap().commit_lsn
}

#[test]
fn a_group_is_recorded_and_acknowledged_only_once_the_sink_committed_it() {
    let path = state_file("flush");
    let sink = Grouping::default();
    let mut s = Stream::start(sink.clone(), state(Vec::new()), Some(path.clone()));
    s.pipe.group_commits(true);

    assert_eq!(s.txn(101, vec![insert(1, 1)]), None, "not durable yet");
    let first = s.lsn - 0x30;
    assert_eq!(s.txn(102, vec![insert(2, 2), insert(3, 3)]), None);
    let (second_commit, second_end) = (s.lsn - 0x30, s.lsn);
    assert!(s.pipe.has_staged());
    assert!(
        sink.0.lock().unwrap().commits.is_empty(),
        "nothing committed"
    );
    assert_eq!(
        on_disk(&path),
        Lsn::ZERO,
        "the state file waits for the sink"
    );
    assert_eq!(
        s.pipe.state().commit_lsn,
        Lsn::ZERO,
        "a reconnection resumes before the group"
    );

    assert_eq!(s.pipe.flush().unwrap(), Some(Lsn(second_end)));
    assert_eq!(
        sink.0.lock().unwrap().commits,
        vec![3],
        "one commit, 3 changes"
    );
    assert_eq!(on_disk(&path), Lsn(second_commit));
    assert_eq!(s.pipe.state().end_lsn, Lsn(second_end));
    assert!(!s.pipe.has_staged());
    assert_eq!(s.pipe.flush().unwrap(), None, "nothing more to flush");
    assert!(first < second_commit);
}

#[test]
fn a_position_reported_between_transactions_commits_the_group_first() {
    let path = state_file("idle");
    let sink = Grouping::default();
    let mut s = Stream::start(sink.clone(), state(Vec::new()), Some(path.clone()));
    s.pipe.group_commits(true);
    assert_eq!(s.txn(101, vec![insert(1, 1)]), None);
    let commit = s.lsn - 0x30;
    let idle = Lsn(s.lsn + 0x1000);
    assert_eq!(s.pipe.idle_at(idle).unwrap(), Some(idle));
    assert_eq!(sink.0.lock().unwrap().commits, vec![1]);
    assert_eq!(on_disk(&path), Lsn(commit));
    assert_eq!(State::load(&path).unwrap().unwrap().end_lsn, idle);
}

/// The sink's coverage (what a WAL-fed stream table's refresh waits for, spec/change-buffer.md
/// §5) comes from a coverage message's position only, after the group committed; a
/// keepalive's position gives none.
#[test]
fn coverage_is_given_only_after_the_group_committed() {
    let sink = Grouping::default();
    let mut s = Stream::start(sink.clone(), state(Vec::new()), None);
    s.pipe.group_commits(true);
    assert_eq!(s.txn(101, vec![insert(1, 1)]), None);
    let idle = Lsn(s.lsn + 0x1000);
    assert_eq!(s.pipe.idle_at(idle).unwrap(), Some(idle));
    assert!(
        sink.0.lock().unwrap().covered.is_empty(),
        "a keepalive covers nothing"
    );
    assert_eq!(s.txn(102, vec![insert(2, 2)]), None);
    let mark = Lsn(s.lsn + 0x1000);
    assert_eq!(s.pipe.covered_at(mark).unwrap(), Some(mark));
    assert_eq!(
        sink.0.lock().unwrap().covered,
        vec![(mark, 2)],
        "after the group's commit"
    );
}

#[test]
fn without_grouping_every_transaction_is_committed_and_acknowledged() {
    let path = state_file("plain");
    let sink = Grouping::default();
    let mut s = Stream::start(sink.clone(), state(Vec::new()), Some(path.clone()));
    assert_eq!(s.txn(101, vec![insert(1, 1)]), Some(Lsn(s.lsn)));
    assert_eq!(s.txn(102, vec![insert(2, 2)]), Some(Lsn(s.lsn)));
    assert_eq!(sink.0.lock().unwrap().commits, vec![1, 1]);
    assert_eq!(on_disk(&path), Lsn(s.lsn - 0x30));
    assert!(!s.pipe.has_staged());
}

/// The counters (`--metrics`) count a change once the sink made it durable: a group waiting
/// for its commit counts nothing, and a transaction a lost connection left half delivered
/// counts only when the resumed pipeline delivers it again, once.
#[test]
fn changes_count_in_the_counters_once_durable() {
    use rowid_cdc::Op;
    use rowid_cdc::counters::SharedCounters;
    use rowid_pgoutput::Message;

    let counted = |c: &SharedCounters| {
        let c = c.snapshot();
        (
            c.changes
                .get(&(Arc::from("public.t"), Op::Insert))
                .copied()
                .unwrap_or(0),
            c.transactions,
        )
    };
    let path = state_file("counters");
    let counters = SharedCounters::new();
    let mut s = Stream::start(Grouping::default(), state(Vec::new()), Some(path.clone()));
    s.pipe.report_to(counters.clone());
    s.pipe.group_commits(true);
    s.txn(101, vec![insert(1, 1), insert(2, 2)]);
    s.txn(102, vec![insert(3, 3)]);
    assert_eq!(counted(&counters), (0, 0), "the group is not durable yet");
    s.pipe.flush().unwrap();
    assert_eq!(counted(&counters), (3, 2));
    let durable = counters.snapshot().durable;
    assert_eq!(durable, Lsn(s.lsn), "the group's end");

    // Half of transaction 103 reaches the sink, then the connection is lost.
    s.send(Message::Begin {
        final_lsn: s.lsn + 0x1000,
        commit_ts: 0,
        xid: 103,
    });
    s.send(pipeline_kit::relation(&["id"]));
    s.send(insert(4, 4));
    drop(s);
    assert_eq!(counted(&counters), (3, 2), "nothing of 103 counted");
    // The resumed pipeline gets 103 again from its start, whole.
    let resumed = State::load(&path).unwrap().unwrap();
    let mut s = Stream::start(Grouping::default(), resumed, Some(path.clone()));
    s.pipe.report_to(counters.clone());
    s.txn(103, vec![insert(4, 4), insert(5, 5)]);
    assert_eq!(counted(&counters), (5, 3), "103 counted once");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
