//! The state file, format 5 (`spec/state-file.md`): where a restart resumes. It holds the
//! slot, the last commit whose changes the sink made durable (its commit LSN, to skip it when
//! the server sends it again), the position acknowledged to the server (that commit's end,
//! or a later position the server reported while nothing was in flight), the sink's own
//! record of where that commit left it (opaque here: [`crate::sink::Durable`]), the OID of
//! the identity schema table whose rows it trusts, the identity schemas as of that commit,
//! and where the chunked snapshots stand ([`ChunkState`]). No password, no DSN. Files of
//! formats 4, 3 and 2 are read too.
//!
//! Written atomically: a temporary file beside it is written and fsynced, renamed over the
//! state file, and the directory is fsynced, so a crash leaves the old state or the new one,
//! never a mix.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rowid_registry::schema_message::{RelationSchema, SchemaMessage};
use serde_json::{Value, json};

use crate::chunks::ChunkState;
use crate::lsn::Lsn;

/// The state file's format.
pub const STATE_FORMAT: u64 = 5;

/// Where capture stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// The replication slot.
    pub slot: String,
    /// The publication.
    pub publication: String,
    /// Commit LSN of the last transaction the sink made durable (`0/0`: none yet).
    pub commit_lsn: Lsn,
    /// The position acknowledged to the server and resumed from: the end of that
    /// transaction, or a later position the server reported with nothing in flight.
    pub end_lsn: Lsn,
    /// `pg_class.oid` of `pgtrickle.identity_schemas`, authenticated when the slot was
    /// created (0: none).
    pub identity_table: u32,
    /// The sink's record of where that transaction left it ([`crate::sink::Durable`]),
    /// kept without being read here (`None`: the sink keeps none).
    pub sink: Option<Value>,
    /// The identity schemas as of that transaction.
    pub schemas: Vec<RelationSchema>,
    /// The copy under the slot's exported snapshot (`--snapshot` at slot creation: tables
    /// that are not read in chunks), if one was asked for.
    pub snapshot: Option<SnapshotState>,
    /// The chunked snapshots of keyed tables: each table's cursor, and the chunk delivered
    /// before its watermark (spec/state-file.md §2.2, [`crate::chunks`]).
    pub chunks: ChunkState,
}

/// Where the initial snapshot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotState {
    /// Being copied: its rows may be partly in the sink. The slot's exported snapshot is gone
    /// once streaming began, so it cannot be resumed: a restart refuses, naming the fix.
    Pending,
    /// Every row is in the sink, before the first change of the stream.
    Done,
}

impl SnapshotState {
    /// `pending` or `done`.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotState::Pending => "pending",
            SnapshotState::Done => "done",
        }
    }
}

/// The state file could not be read or written.
#[derive(Debug)]
pub enum StateError {
    /// An I/O error on `path`.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// The file is not a state file of this format.
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Io { path, error } => write!(f, "state file {}: {error}", path.display()),
            StateError::Invalid { path, problem } => write!(
                f,
                "state file {}: {problem} (it was not written by this version of rowid-cdc, or \
                 was edited; nothing was changed)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StateError {}

impl State {
    /// The state as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "format": STATE_FORMAT,
            "slot": self.slot,
            "publication": self.publication,
            "commit_lsn": self.commit_lsn.to_string(),
            "end_lsn": self.end_lsn.to_string(),
            "sink": self.sink,
            "snapshot": self.snapshot.map(SnapshotState::name),
            "chunks": self.chunks.to_json(),
            "identity_table": self.identity_table,
            "schemas": self.schemas.iter()
                .map(|s| SchemaMessage::Schema(s.clone()).to_json())
                .collect::<Vec<_>>(),
        })
    }

    /// Reads a state written by [`State::to_json`].
    pub fn from_json(v: &Value) -> Result<State, String> {
        let obj = v.as_object().ok_or("not a JSON object")?;
        let known = [
            "format",
            "slot",
            "publication",
            "commit_lsn",
            "end_lsn",
            "sink",
            "sink_len",
            "snapshot",
            "chunks",
            "identity_table",
            "schemas",
        ];
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown member {k:?}"));
        }
        let str_of = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{k}: missing or not a string"))
        };
        let format = obj.get("format").and_then(Value::as_u64);
        let (sink_key, other_key) = match format {
            Some(3..=STATE_FORMAT) => ("sink", "sink_len"),
            Some(2) => ("sink_len", "sink"),
            other => {
                return Err(format!(
                    "format {other:?} is not {STATE_FORMAT} (or 4, 3, 2)"
                ));
            }
        };
        if !matches!(format, Some(4 | STATE_FORMAT)) && obj.contains_key("chunks") {
            return Err(format!("unknown member \"chunks\" in format {format:?}"));
        }
        if obj.contains_key(other_key) {
            return Err(format!("unknown member {other_key:?} in format {format:?}"));
        }
        let lsn_of = |k: &str| str_of(k)?.parse::<Lsn>().map_err(|e| format!("{k}: {e}"));
        let sink = match (obj.get(sink_key), format) {
            (None | Some(Value::Null), _) => None,
            (Some(v @ Value::Object(_)), Some(3..=STATE_FORMAT)) => Some(v.clone()),
            // Format 2 kept only a file sink's length.
            (Some(v), Some(2)) => Some(json!({
                "file_len": v.as_u64().ok_or("sink_len: not a length")?
            })),
            (Some(_), _) => return Err("sink: not an object".to_string()),
        };
        let schemas = obj
            .get("schemas")
            .and_then(Value::as_array)
            .ok_or("schemas: missing or not an array")?
            .iter()
            .map(|s| match SchemaMessage::from_json(s) {
                Ok(SchemaMessage::Schema(s)) => Ok(s),
                Ok(SchemaMessage::Dropped { .. }) => Err("schemas: a dropped relation".to_string()),
                Err(e) => Err(format!("schemas: {e}")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let identity_table = obj
            .get("identity_table")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or("identity_table: missing or not an OID")?;
        let snapshot = match obj.get("snapshot") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "pending" => Some(SnapshotState::Pending),
            Some(Value::String(s)) if s == "done" => Some(SnapshotState::Done),
            Some(other) => return Err(format!("snapshot: {other} is not pending, done or null")),
        };
        let chunks = match (obj.get("chunks"), format) {
            (None, _) => ChunkState::default(),
            (Some(Value::Array(list)), Some(4)) => ChunkState::from_format_4(list)?,
            (Some(v), Some(STATE_FORMAT)) => ChunkState::from_json(v)?,
            (Some(_), _) => return Err("chunks: not this format's".to_string()),
        };
        Ok(State {
            snapshot,
            chunks,
            slot: str_of("slot")?.to_string(),
            publication: str_of("publication")?.to_string(),
            commit_lsn: lsn_of("commit_lsn")?,
            end_lsn: lsn_of("end_lsn")?,
            identity_table,
            sink,
            schemas,
        })
    }

    /// Reads the state file; `None` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<State>, StateError> {
        let text = match fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(StateError::Io {
                    path: path.to_path_buf(),
                    error,
                });
            }
        };
        let invalid = |problem: String| StateError::Invalid {
            path: path.to_path_buf(),
            problem,
        };
        let value: Value =
            serde_json::from_slice(&text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        State::from_json(&value).map(Some).map_err(invalid)
    }

    /// Writes the state file atomically (temporary file, fsync, rename, directory fsync).
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let io = |error| StateError::Io {
            path: path.to_path_buf(),
            error,
        };
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        let mut text = self.to_json().to_string();
        text.push('\n');
        {
            let mut options = OpenOptions::new();
            options.write(true).create(true).truncate(true);
            // Chunk cursors hold key values (identities): readable by its owner only.
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut f = options.open(&tmp).map_err(io)?;
            f.write_all(text.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        fs::rename(&tmp, path).map_err(io)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::{After, ChunkCursor, View};

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "rowid-cdc-state-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        d
    }

    #[test]
    fn state_round_trips_atomically() {
        let d = dir();
        let path = d.join("cdc.state");
        assert!(matches!(State::load(&path), Ok(None)));
        let s = State {
            slot: "s".into(),
            publication: "p".into(),
            commit_lsn: Lsn(0x16_B374_D848),
            end_lsn: Lsn(0x16_B374_D850),
            identity_table: 16400,
            sink: Some(json!({"file_len": 1234})),
            schemas: vec![],
            snapshot: Some(SnapshotState::Pending),
            chunks: ChunkState {
                cursors: vec![
                    ChunkCursor {
                        relid: 16385,
                        view: View {
                            after: Some(After {
                                identity: vec![0x02, 0x00, 0xff],
                                key: vec![Some(bytes::Bytes::from_static(&[0, 0, 0, 7])), None],
                            }),
                            pending: vec![],
                        },
                        unconfirmed: vec![77],
                        done: false,
                    },
                    ChunkCursor {
                        done: true,
                        ..ChunkCursor::from_start(16386)
                    },
                ],
                delivered: None,
            },
        };
        s.save(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(State::load(&path).ok().flatten(), Some(s.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
            assert_eq!(mode.ok(), Some(0o600), "the owner's only");
        }
        assert!(
            !d.join("cdc.state.tmp").exists(),
            "the temporary file was renamed"
        );
        // A later state replaces it whole.
        let later = State {
            commit_lsn: Lsn(0x17_0000_0000),
            sink: None,
            snapshot: Some(SnapshotState::Done),
            ..s
        };
        later.save(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(State::load(&path).ok().flatten(), Some(later));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn foreign_or_damaged_files_are_refused() {
        let d = dir();
        let path = d.join("cdc.state");
        for text in [
            "",
            "{",
            "[]",
            r#"{"format": 3}"#,
            r#"{"format": 3, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "snapshot": "half", "schemas": []}"#,
            r#"{"format": 6, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "schemas": []}"#,
            r#"{"format": 5, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "chunks": [], "schemas": []}"#,
            r#"{"format": 3, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "chunks": [], "schemas": []}"#,
            r#"{"format": 4, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "chunks": [{"relid": 1, "after": {"identity": "0g", "key": []}, "done": false}], "schemas": []}"#,
            r#"{"format": 4, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "chunks": [{"relid": 1, "done": false, "extra": 1}], "schemas": []}"#,
            r#"{"format": 3, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "sink": 5, "schemas": []}"#,
            r#"{"format": 3, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "sink_len": 5, "schemas": []}"#,
            r#"{"format": 2, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "sink": {}, "schemas": []}"#,
            r#"{"format": 1, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "schemas": []}"#,
            r#"{"format": 2, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "x", "identity_table": 1, "schemas": []}"#,
            r#"{"format": 2, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "schemas": []}"#,
            r#"{"format": 2, "slot": "s", "publication": "p", "commit_lsn": "0/0", "end_lsn": "0/0", "identity_table": 1, "schemas": [], "password": "x"}"#,
        ] {
            fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            let err = State::load(&path).expect_err(text);
            assert!(err.to_string().contains("cdc.state"), "{err}");
        }
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn format_2_files_are_read_with_their_file_length() {
        let v: Value = serde_json::from_str(
            r#"{"format": 2, "slot": "s", "publication": "p", "commit_lsn": "0/10", "end_lsn": "0/20", "sink_len": 77, "identity_table": 9, "schemas": []}"#,
        )
        .unwrap_or_default();
        let s = State::from_json(&v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.sink, Some(json!({"file_len": 77})));
        assert_eq!((s.commit_lsn, s.end_lsn), (Lsn(0x10), Lsn(0x20)));
        // Written back as the current format.
        assert_eq!(s.to_json()["format"], STATE_FORMAT);
        assert_eq!(s.to_json()["sink"], json!({"file_len": 77}));
    }

    #[test]
    fn format_3_files_are_read_without_chunks() {
        let v: Value = serde_json::from_str(
            r#"{"format": 3, "slot": "s", "publication": "p", "commit_lsn": "0/10", "end_lsn": "0/20", "sink": null, "snapshot": "done", "identity_table": 9, "schemas": []}"#,
        )
        .unwrap_or_default();
        let s = State::from_json(&v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (s.snapshot, s.chunks.is_empty()),
            (Some(SnapshotState::Done), true)
        );
        assert_eq!(s.to_json()["format"], STATE_FORMAT);
    }

    #[test]
    fn format_4_files_are_read_with_their_cursors() {
        let v: Value = serde_json::from_str(
            r#"{"format": 4, "slot": "s", "publication": "p", "commit_lsn": "0/10", "end_lsn": "0/20", "sink": null, "snapshot": null, "identity_table": 9, "schemas": [], "chunks": [{"relid": 5, "after": {"identity": "02ff", "key": ["07"]}, "done": false}]}"#,
        )
        .unwrap_or_default();
        let s = State::from_json(&v).unwrap_or_else(|e| panic!("{e}"));
        let c = &s.chunks.cursors[0];
        assert_eq!((c.relid, c.done), (5, false));
        assert_eq!(
            c.view.after.as_ref().map(|a| a.identity.clone()),
            Some(vec![2, 0xff])
        );
        assert!(c.view.pending.is_empty() && c.unconfirmed.is_empty());
        assert_eq!(s.to_json()["format"], STATE_FORMAT);
    }
}
