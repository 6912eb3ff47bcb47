//! The decoder: one message's bytes in, a [`Message`] out. Strict: every length is checked,
//! trailing bytes are an error, nothing allocates more than the input can justify, and no
//! input panics.

use bytes::Bytes;

use crate::error::DecodeError;
use crate::message::{
    Column, CommitInfo, Message, OldTuple, PrepareInfo, Relation, RelationColumn, Tuple,
};
use crate::reader::Reader;

/// Options that change the wire layout (the `START_REPLICATION` options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// `proto_version`, 1 to 4.
    pub proto_version: u32,
    /// `streaming = parallel` (protocol 4): Stream Abort carries its LSN and timestamp.
    pub parallel_streaming: bool,
}

/// Decodes a stream of pgoutput messages, tracking whether a streamed transaction is open
/// (inside one, change messages carry their xid).
#[derive(Clone, Debug)]
pub struct Decoder {
    options: Options,
    in_stream: bool,
}

impl Decoder {
    /// A decoder for the given options.
    pub fn new(options: Options) -> Decoder {
        Decoder {
            options,
            in_stream: false,
        }
    }

    /// Decodes one message.
    pub fn decode(&mut self, buf: Bytes) -> Result<Message, DecodeError> {
        let mut r = Reader::new(buf);
        let tag = r.u8()?;
        let msg = match tag {
            b'B' | b'C' | b'O' => transaction(tag, &mut r)?,
            b'R' | b'Y' => self.schema(tag, &mut r)?,
            b'I' | b'U' | b'D' | b'T' => self.change(tag, &mut r)?,
            b'M' => self.logical_message(&mut r)?,
            b'S' | b'E' | b'c' | b'A' => self.stream(tag, &mut r)?,
            b'b' | b'P' | b'p' | b'K' | b'r' => self.two_phase(tag, &mut r)?,
            _ => return Err(DecodeError::UnknownMessage { tag }),
        };
        r.finish()?;
        Ok(msg)
    }

    /// Fails unless the negotiated protocol has message `tag` (introduced in `min`).
    fn needs(&self, tag: u8, min: u32) -> Result<(), DecodeError> {
        let version = self.options.proto_version;
        if version < min {
            Err(DecodeError::ProtocolVersion { tag, version })
        } else {
            Ok(())
        }
    }

    /// The xid that change messages carry inside a streamed transaction.
    fn stream_xid(&self, r: &mut Reader) -> Result<Option<u32>, DecodeError> {
        if self.in_stream {
            Ok(Some(r.u32()?))
        } else {
            Ok(None)
        }
    }

    /// `R` Relation, `Y` Type.
    fn schema(&self, tag: u8, r: &mut Reader) -> Result<Message, DecodeError> {
        let xid = self.stream_xid(r)?;
        Ok(if tag == b'R' {
            Message::Relation {
                xid,
                relation: relation(r)?,
            }
        } else {
            Message::Type {
                xid,
                oid: r.u32()?,
                namespace: r.string()?,
                name: r.string()?,
            }
        })
    }

    /// `I` Insert, `U` Update, `D` Delete, `T` Truncate.
    fn change(&self, tag: u8, r: &mut Reader) -> Result<Message, DecodeError> {
        let xid = self.stream_xid(r)?;
        if tag == b'T' {
            let n = count(r, 4)?;
            let flags = r.u8()?;
            let relids = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
            return Ok(Message::Truncate { xid, flags, relids });
        }
        let relid = r.u32()?;
        Ok(match tag {
            b'I' => {
                expect(r, b'N', "'N' (new tuple)")?;
                Message::Insert {
                    xid,
                    relid,
                    new: tuple(r)?,
                }
            }
            b'U' => {
                let at = r.offset();
                let old = match r.u8()? {
                    b'K' => Some(OldTuple::Key(tuple(r)?)),
                    b'O' => Some(OldTuple::Full(tuple(r)?)),
                    b'N' => None,
                    found => {
                        return Err(DecodeError::Unexpected {
                            offset: at,
                            found,
                            expected: "'K', 'O' or 'N'",
                        });
                    }
                };
                if old.is_some() {
                    expect(r, b'N', "'N' (new tuple)")?;
                }
                Message::Update {
                    xid,
                    relid,
                    old,
                    new: tuple(r)?,
                }
            }
            _ => {
                let at = r.offset();
                let old = match r.u8()? {
                    b'K' => OldTuple::Key(tuple(r)?),
                    b'O' => OldTuple::Full(tuple(r)?),
                    found => {
                        return Err(DecodeError::Unexpected {
                            offset: at,
                            found,
                            expected: "'K' or 'O'",
                        });
                    }
                };
                Message::Delete { xid, relid, old }
            }
        })
    }

    /// `M` logical decoding message (`pg_logical_emit_message`).
    fn logical_message(&self, r: &mut Reader) -> Result<Message, DecodeError> {
        let xid = self.stream_xid(r)?;
        let flags = r.u8()?;
        let lsn = r.u64()?;
        let prefix = r.string()?;
        let len = length(r)?;
        Ok(Message::Message {
            xid,
            transactional: flags & 1 != 0,
            lsn,
            prefix,
            content: r.bytes(len)?,
        })
    }

    /// `S` Stream Start, `E` Stream Stop, `c` Stream Commit, `A` Stream Abort (protocol 2+).
    ///
    /// One exception to the protocol version: a Stream Abort outside a streamed block is
    /// decoded on any protocol (with its protocol-1 layout, xid and subxid), because
    /// PostgreSQL 18 sends one on sessions that never stream. Over
    /// `logical_decoding_work_mem` it discards the changes of a transaction it finds aborted
    /// (`ReorderBufferCheckAndTruncateAbortedTXN`, new in 18), and the truncation marks the
    /// transaction's subtransactions that had changes as streamed; their abort record then
    /// reaches `pgoutput_stream_abort`, which does not check that streaming was asked for.
    /// What such a message names was never sent: the caller decides what it means.
    fn stream(&mut self, tag: u8, r: &mut Reader) -> Result<Message, DecodeError> {
        if tag != b'A' || self.in_stream {
            self.needs(tag, 2)?;
        }
        Ok(match tag {
            b'S' => {
                let xid = r.u32()?;
                let first_segment = r.u8()? == 1;
                self.in_stream = true;
                Message::StreamStart { xid, first_segment }
            }
            b'E' => {
                self.in_stream = false;
                Message::StreamStop
            }
            b'c' => Message::StreamCommit {
                xid: r.u32()?,
                commit: commit_info(r)?,
            },
            _ => {
                let xid = r.u32()?;
                let subxid = r.u32()?;
                let abort = if self.options.proto_version >= 4 && self.options.parallel_streaming {
                    Some((r.u64()?, r.i64()?))
                } else {
                    None
                };
                Message::StreamAbort { xid, subxid, abort }
            }
        })
    }

    /// `b` Begin Prepare, `P` Prepare, `p` Stream Prepare, `K` Commit Prepared, `r` Rollback
    /// Prepared (protocol 3+).
    fn two_phase(&self, tag: u8, r: &mut Reader) -> Result<Message, DecodeError> {
        self.needs(tag, 3)?;
        Ok(match tag {
            b'b' => Message::BeginPrepare {
                prepare_lsn: r.u64()?,
                end_lsn: r.u64()?,
                prepare_ts: r.i64()?,
                xid: r.u32()?,
                gid: r.string()?,
            },
            b'P' => Message::Prepare(prepare_info(r)?),
            b'p' => Message::StreamPrepare(prepare_info(r)?),
            b'K' => Message::CommitPrepared {
                commit: commit_info(r)?,
                xid: r.u32()?,
                gid: r.string()?,
            },
            _ => Message::RollbackPrepared {
                flags: r.u8()?,
                prepare_end_lsn: r.u64()?,
                rollback_end_lsn: r.u64()?,
                prepare_ts: r.i64()?,
                rollback_ts: r.i64()?,
                xid: r.u32()?,
                gid: r.string()?,
            },
        })
    }
}

/// `B` Begin, `C` Commit, `O` Origin.
fn transaction(tag: u8, r: &mut Reader) -> Result<Message, DecodeError> {
    Ok(match tag {
        b'B' => Message::Begin {
            final_lsn: r.u64()?,
            commit_ts: r.i64()?,
            xid: r.u32()?,
        },
        b'C' => Message::Commit(commit_info(r)?),
        _ => Message::Origin {
            lsn: r.u64()?,
            name: r.string()?,
        },
    })
}

fn commit_info(r: &mut Reader) -> Result<CommitInfo, DecodeError> {
    Ok(CommitInfo {
        flags: r.u8()?,
        commit_lsn: r.u64()?,
        end_lsn: r.u64()?,
        commit_ts: r.i64()?,
    })
}

fn prepare_info(r: &mut Reader) -> Result<PrepareInfo, DecodeError> {
    Ok(PrepareInfo {
        flags: r.u8()?,
        prepare_lsn: r.u64()?,
        end_lsn: r.u64()?,
        prepare_ts: r.i64()?,
        xid: r.u32()?,
        gid: r.string()?,
    })
}

fn expect(r: &mut Reader, want: u8, expected: &'static str) -> Result<(), DecodeError> {
    let offset = r.offset();
    let found = r.u8()?;
    if found == want {
        Ok(())
    } else {
        Err(DecodeError::Unexpected {
            offset,
            found,
            expected,
        })
    }
}

/// A non-negative int32 length.
fn length(r: &mut Reader) -> Result<usize, DecodeError> {
    let offset = r.offset();
    usize::try_from(r.i32()?).map_err(|_| DecodeError::NegativeLength { offset })
}

/// A non-negative count whose elements take at least `min_size` bytes each: a count the
/// remaining input cannot hold is rejected before anything is allocated for it.
fn count(r: &mut Reader, min_size: usize) -> Result<usize, DecodeError> {
    let offset = r.offset();
    let n = usize::try_from(r.i32()?).map_err(|_| DecodeError::NegativeLength { offset })?;
    if n.saturating_mul(min_size) > r.remaining() {
        return Err(DecodeError::Truncated { offset: r.offset() });
    }
    Ok(n)
}

fn relation(r: &mut Reader) -> Result<Relation, DecodeError> {
    let relid = r.u32()?;
    let namespace = r.string()?;
    let name = r.string()?;
    let at = r.offset();
    let replica_identity = r.u8()?;
    if !matches!(replica_identity, b'd' | b'n' | b'f' | b'i') {
        return Err(DecodeError::Unexpected {
            offset: at,
            found: replica_identity,
            expected: "replica identity 'd', 'n', 'f' or 'i'",
        });
    }
    let at = r.offset();
    let n = usize::try_from(r.i16()?).map_err(|_| DecodeError::NegativeLength { offset: at })?;
    // flags (1) + name (>= 1) + type OID (4) + typmod (4)
    if n.saturating_mul(10) > r.remaining() {
        return Err(DecodeError::Truncated { offset: r.offset() });
    }
    let mut columns = Vec::with_capacity(n);
    for _ in 0..n {
        columns.push(RelationColumn {
            flags: r.u8()?,
            name: r.string()?,
            type_oid: r.u32()?,
            typmod: r.i32()?,
        });
    }
    Ok(Relation {
        relid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

fn tuple(r: &mut Reader) -> Result<Tuple, DecodeError> {
    let at = r.offset();
    let n = usize::try_from(r.i16()?).map_err(|_| DecodeError::NegativeLength { offset: at })?;
    if n > r.remaining() {
        return Err(DecodeError::Truncated { offset: r.offset() });
    }
    let mut columns = Vec::with_capacity(n);
    for _ in 0..n {
        let at = r.offset();
        columns.push(match r.u8()? {
            b'n' => Column::Null,
            b'u' => Column::UnchangedToast,
            b't' => {
                let len = length(r)?;
                Column::Text(r.bytes(len)?)
            }
            b'b' => {
                let len = length(r)?;
                Column::Binary(r.bytes(len)?)
            }
            found => {
                return Err(DecodeError::Unexpected {
                    offset: at,
                    found,
                    expected: "column kind 'n', 'u', 't' or 'b'",
                });
            }
        });
    }
    Ok(columns)
}
