//! JSON lines: into a file made durable at each commit, or to standard output.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Durable, Sink};
use crate::event::ChangeEvent;
use crate::json_line;

/// JSON lines into a file: written through a buffer, fsynced at every commit. At open, bytes
/// past the length the state file recorded (a transaction that never committed) are cut off,
/// so a restart neither loses nor repeats a line. The file is created readable by its owner
/// only (`0600`), and an existing one is made so: it holds identities, which are the source's
/// key values (design proposal §11.1).
#[derive(Debug)]
pub struct JsonlFile {
    path: PathBuf,
    out: BufWriter<File>,
    /// Bytes written.
    len: u64,
    /// Bytes made durable.
    committed: u64,
    line: String,
}

impl JsonlFile {
    /// Opens `path` for appending. `recorded` is what the state file holds of this sink,
    /// written by [`Sink::commit`] (`None`: no state, so the file must be empty or absent:
    /// appending to lines no state accounts for could repeat them).
    pub fn open(path: &Path, recorded: Option<&Value>) -> io::Result<JsonlFile> {
        let committed_len = recorded.map(committed_len).transpose()?;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        if file.metadata()?.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        let actual = file.metadata()?.len();
        let len = match committed_len {
            Some(len) if len <= actual => len,
            Some(len) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} has {actual} bytes, less than the {len} the state file says were \
                         made durable: it was truncated or replaced",
                        path.display()
                    ),
                ));
            }
            None if actual == 0 => 0,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} already holds {actual} bytes that no state file accounts for: give \
                         the state file that wrote it (--state), or another output file",
                        path.display()
                    ),
                ));
            }
        };
        if actual > len {
            // The tail is a transaction that was written but never committed.
            file.set_len(len)?;
            file.sync_all()?;
        }
        let mut file = file;
        file.seek(SeekFrom::Start(len))?;
        Ok(JsonlFile {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 16, file),
            len,
            committed: len,
            line: String::with_capacity(512),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Sink for JsonlFile {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        self.line.clear();
        json_line::write(event, &mut self.line);
        self.out.write_all(self.line.as_bytes())?;
        self.len += self.line.len() as u64;
        Ok(())
    }

    fn commit(&mut self) -> io::Result<Durable> {
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        self.committed = self.len;
        Ok(record(self.len))
    }

    fn durable(&self) -> Durable {
        record(self.committed)
    }
}

/// The state file's record of a file sink: its length after the last durable transaction.
fn record(len: u64) -> Durable {
    Durable {
        record: Some(json!({ "file_len": len })),
    }
}

/// The length in a record written by [`record`].
fn committed_len(recorded: &Value) -> io::Result<u64> {
    recorded
        .get("file_len")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the state file's sink record {recorded} is not a file sink's (it was \
                     written by another sink): give that sink, or start over"
                ),
            )
        })
}

/// JSON lines to standard output, flushed at every commit. Durable only as far as the reader
/// of the pipe makes it: after a crash the last transactions may be repeated (at least once).
#[derive(Debug)]
pub struct JsonlStdout {
    out: BufWriter<io::Stdout>,
    line: String,
}

impl JsonlStdout {
    /// Standard output.
    pub fn new() -> JsonlStdout {
        JsonlStdout {
            out: BufWriter::with_capacity(1 << 16, io::stdout()),
            line: String::with_capacity(512),
        }
    }
}

impl Default for JsonlStdout {
    fn default() -> Self {
        JsonlStdout::new()
    }
}

impl Sink for JsonlStdout {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        self.line.clear();
        json_line::write(event, &mut self.line);
        self.out.write_all(self.line.as_bytes())
    }

    fn commit(&mut self) -> io::Result<Durable> {
        self.out.flush()?;
        Ok(Durable::default())
    }

    fn durable(&self) -> Durable {
        Durable::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Op;
    use crate::lsn::Lsn;
    use std::sync::Arc;

    fn event(xid: u32) -> ChangeEvent {
        ChangeEvent {
            commit_lsn: Lsn(u64::from(xid) * 100),
            lsn: Lsn(u64::from(xid) * 100 - 1),
            xid,
            commit_ts: 0,
            relid: 1,
            relation: "public.t".into(),
            op: Op::Insert,
            columns: Arc::from([]),
            domain: None,
            key: Arc::from([]),
            old_id: None,
            new_id: Some(vec![2, 1]),
            old: None,
            old_kind: None,
            new: None,
            backfilled: vec![],
            unchanged_toast: vec![],
            unidentified: None,
            schema: None,
        }
    }

    fn path(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("rowid-cdc-sink-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn lines(p: &Path) -> Vec<u32> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
                v["xid"].as_u64().unwrap_or(0) as u32
            })
            .collect()
    }

    #[test]
    fn an_unfinished_transaction_is_cut_off_at_restart() {
        let p = path("restart");
        let mut sink = JsonlFile::open(&p, None).unwrap_or_else(|e| panic!("{e}"));
        sink.change(&event(1)).unwrap_or_else(|e| panic!("{e}"));
        let durable = sink.commit().unwrap_or_else(|e| panic!("{e}"));
        // Transaction 2 is written, then the process dies before its commit.
        sink.change(&event(2)).unwrap_or_else(|e| panic!("{e}"));
        sink.out.flush().unwrap_or_else(|e| panic!("{e}"));
        drop(sink);
        assert_eq!(lines(&p), [1, 2]);
        // The restart resumes at the recorded length; transaction 2 is sent again.
        let mut sink =
            JsonlFile::open(&p, durable.record.as_ref()).unwrap_or_else(|e| panic!("{e}"));
        sink.change(&event(2)).unwrap_or_else(|e| panic!("{e}"));
        sink.commit().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lines(&p), [1, 2], "once each");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn the_file_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let p = path("mode");
        let sink = JsonlFile::open(&p, None).unwrap_or_else(|e| panic!("{e}"));
        drop(sink);
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(
            mode(&p).ok(),
            Some(0o600),
            "created 0600 whatever the umask"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e}"));
        let sink =
            JsonlFile::open(&p, Some(&json!({"file_len": 0}))).unwrap_or_else(|e| panic!("{e}"));
        drop(sink);
        assert_eq!(mode(&p).ok(), Some(0o600), "an existing file is made 0600");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn files_no_state_accounts_for_are_refused() {
        let p = path("foreign");
        std::fs::write(&p, "{}\n").unwrap_or_else(|e| panic!("{e}"));
        let err = JsonlFile::open(&p, None).expect_err("a file with lines and no state");
        assert!(
            err.to_string().contains("no state file accounts for"),
            "{err}"
        );
        let err = JsonlFile::open(&p, Some(&json!({"file_len": 100})))
            .expect_err("shorter than recorded");
        assert!(err.to_string().contains("truncated or replaced"), "{err}");
        let err = JsonlFile::open(&p, Some(&json!({"buffer": "x"})))
            .expect_err("a record another sink wrote");
        assert!(err.to_string().contains("not a file sink's"), "{err}");
        let _ = std::fs::remove_file(&p);
    }
}
