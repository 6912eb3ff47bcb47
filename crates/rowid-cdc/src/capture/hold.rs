//! Messages held back within a transaction, in order: what the capture keeps from a change of
//! a relation that has no identity schema yet until that relation's first schema arrives in
//! the same transaction (`CREATE TABLE ... AS` and `SELECT INTO` write the new table's rows
//! before the event trigger, at the command's end, writes its schema), or until the commit.
//!
//! A queue holds the messages in their pgoutput encoding with their LSNs: in memory up to a
//! bound ([`HOLD_MEMORY`], unless a test lowers it with `ROWID_CDC_TEST_HOLD_BYTES`), then in a
//! temporary file that is unlinked as soon as it is created (so nothing is left behind, even
//! after a crash), so memory stays flat in the size of what is held. A queue is written, then
//! read once from its start.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::lsn::Lsn;

/// Bytes of held messages kept in memory at most; the rest goes to a temporary file.
pub const HOLD_MEMORY: usize = 64 << 20;

/// The bound in force ([`HOLD_MEMORY`], or a test's).
fn memory_bound() -> usize {
    static BOUND: OnceLock<usize> = OnceLock::new();
    *BOUND.get_or_init(|| {
        std::env::var("ROWID_CDC_TEST_HOLD_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(HOLD_MEMORY)
    })
}

/// Where the spilled part of a queue is.
#[derive(Debug)]
enum Spill {
    /// Nothing spilled.
    None,
    /// Being written.
    Writing(BufWriter<File>),
    /// Being read back, and how many records are left.
    Reading(BufReader<File>, u64),
}

/// Messages in order, in memory up to the bound, then in an unlinked temporary file.
#[derive(Debug)]
pub struct Queue {
    /// Bytes it keeps in memory at most.
    bound: usize,
    memory: VecDeque<(Lsn, Bytes)>,
    memory_bytes: usize,
    spill: Spill,
    spilled: u64,
}

impl Default for Queue {
    fn default() -> Queue {
        Queue::with_bound(memory_bound())
    }
}

impl Queue {
    /// A queue keeping at most `bound` bytes in memory.
    pub fn with_bound(bound: usize) -> Queue {
        Queue {
            bound,
            memory: VecDeque::new(),
            memory_bytes: 0,
            spill: Spill::None,
            spilled: 0,
        }
    }
}

/// An unlinked temporary file: nothing to clean up, whatever happens to the process.
fn anonymous_file() -> io::Result<File> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "rowid-cdc-hold-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut options = OpenOptions::new();
    options.read(true).write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

impl Queue {
    /// Whether it holds nothing.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.spilled == 0
    }

    /// Appends a message.
    pub fn push(&mut self, lsn: Lsn, message: Bytes) -> io::Result<()> {
        if matches!(self.spill, Spill::None)
            && self.memory_bytes.saturating_add(message.len()) <= self.bound
        {
            self.memory_bytes += message.len();
            self.memory.push_back((lsn, message));
            return Ok(());
        }
        if matches!(self.spill, Spill::None) {
            self.spill = Spill::Writing(BufWriter::new(anonymous_file()?));
        }
        let Spill::Writing(w) = &mut self.spill else {
            return Err(io::Error::other("a held queue written while it is read"));
        };
        let len = u32::try_from(message.len())
            .map_err(|_| io::Error::other("a held message larger than 4 GiB"))?;
        w.write_all(&lsn.0.to_be_bytes())?;
        w.write_all(&len.to_be_bytes())?;
        w.write_all(&message)?;
        self.spilled += 1;
        Ok(())
    }

    /// Takes the first message.
    pub fn pop(&mut self) -> io::Result<Option<(Lsn, Bytes)>> {
        if let Some(first) = self.memory.pop_front() {
            return Ok(Some(first));
        }
        if let Spill::Writing(_) = self.spill {
            let Spill::Writing(w) = std::mem::replace(&mut self.spill, Spill::None) else {
                unreachable!("matched just above");
            };
            let mut file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
            file.seek(SeekFrom::Start(0))?;
            self.spill = Spill::Reading(BufReader::new(file), self.spilled);
        }
        let Spill::Reading(r, left) = &mut self.spill else {
            return Ok(None);
        };
        if *left == 0 {
            return Ok(None);
        }
        let mut head = [0u8; 12];
        r.read_exact(&mut head)?;
        let lsn = u64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(head[8..].try_into().unwrap_or_default()) as usize;
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        *left -= 1;
        self.spilled -= 1;
        Ok(Some((Lsn(lsn), Bytes::from(body))))
    }

    /// Whether part of it is in a file.
    #[cfg(test)]
    fn spilled(&self) -> bool {
        !matches!(self.spill, Spill::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_gives_back_what_it_took_in_order_through_its_file() {
        let mut q = Queue::with_bound(64);
        // Past the bound: the rest is spilled.
        let big = Bytes::from(vec![7u8; 33]);
        q.push(Lsn(1), big.clone()).unwrap();
        q.push(Lsn(2), big.clone()).unwrap();
        for i in 3..1000u64 {
            q.push(Lsn(i), Bytes::from(i.to_be_bytes().to_vec()))
                .unwrap();
        }
        assert!(q.spilled());
        assert_eq!(q.pop().unwrap(), Some((Lsn(1), big.clone())));
        assert_eq!(q.pop().unwrap(), Some((Lsn(2), big)));
        for i in 3..1000u64 {
            assert_eq!(
                q.pop().unwrap(),
                Some((Lsn(i), Bytes::from(i.to_be_bytes().to_vec())))
            );
        }
        assert_eq!(q.pop().unwrap(), None);
        assert!(q.is_empty());
    }
}
