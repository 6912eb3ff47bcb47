//! The decoder: one message's bytes in, a [`Message`] out. Strict: every length is checked,
//! trailing bytes are an error, nothing allocates more than the input can justify, and no
//! input panics.

use bytes::Bytes;

use crate::error::DecodeError;
use crate::message::{Column, Message, OldTuple, Relation, RelationColumn, Tuple};
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
        let version = self.options.proto_version;
        let needs = |min: u32| -> Result<(), DecodeError> {
            if version < min {
                Err(DecodeError::ProtocolVersion { tag, version })
            } else {
                Ok(())
            }
        };
        let xid = |r: &mut Reader, in_stream: bool| -> Result<Option<u32>, DecodeError> {
            if in_stream {
                Ok(Some(r.u32()?))
            } else {
                Ok(None)
            }
        };
        let msg = match tag {
            b'B' => Message::Begin {
                final_lsn: r.u64()?,
                commit_ts: r.i64()?,
                xid: r.u32()?,
            },
            b'C' => Message::Commit {
                flags: r.u8()?,
                commit_lsn: r.u64()?,
                end_lsn: r.u64()?,
                commit_ts: r.i64()?,
            },
            b'O' => Message::Origin {
                lsn: r.u64()?,
                name: r.string()?,
            },
            b'R' => {
                let xid = xid(&mut r, self.in_stream)?;
                Message::Relation {
                    xid,
                    relation: relation(&mut r)?,
                }
            }
            b'Y' => Message::Type {
                xid: xid(&mut r, self.in_stream)?,
                oid: r.u32()?,
                namespace: r.string()?,
                name: r.string()?,
            },
            b'I' => {
                let xid = xid(&mut r, self.in_stream)?;
                let relid = r.u32()?;
                expect(&mut r, b'N', "'N' (new tuple)")?;
                Message::Insert {
                    xid,
                    relid,
                    new: tuple(&mut r)?,
                }
            }
            b'U' => {
                let xid = xid(&mut r, self.in_stream)?;
                let relid = r.u32()?;
                let at = r.offset();
                let old = match r.u8()? {
                    b'K' => Some(OldTuple::Key(tuple(&mut r)?)),
                    b'O' => Some(OldTuple::Full(tuple(&mut r)?)),
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
                    expect(&mut r, b'N', "'N' (new tuple)")?;
                }
                Message::Update {
                    xid,
                    relid,
                    old,
                    new: tuple(&mut r)?,
                }
            }
            b'D' => {
                let xid = xid(&mut r, self.in_stream)?;
                let relid = r.u32()?;
                let at = r.offset();
                let old = match r.u8()? {
                    b'K' => OldTuple::Key(tuple(&mut r)?),
                    b'O' => OldTuple::Full(tuple(&mut r)?),
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
            b'T' => {
                let xid = xid(&mut r, self.in_stream)?;
                let n = count(&mut r, 4)?;
                let flags = r.u8()?;
                let relids = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
                Message::Truncate { xid, flags, relids }
            }
            b'M' => {
                let xid = xid(&mut r, self.in_stream)?;
                let flags = r.u8()?;
                let lsn = r.u64()?;
                let prefix = r.string()?;
                let len = length(&mut r)?;
                Message::Message {
                    xid,
                    transactional: flags & 1 != 0,
                    lsn,
                    prefix,
                    content: r.bytes(len)?,
                }
            }
            b'S' => {
                needs(2)?;
                let xid = r.u32()?;
                let first_segment = r.u8()? == 1;
                self.in_stream = true;
                Message::StreamStart { xid, first_segment }
            }
            b'E' => {
                needs(2)?;
                self.in_stream = false;
                Message::StreamStop
            }
            b'c' => {
                needs(2)?;
                Message::StreamCommit {
                    xid: r.u32()?,
                    flags: r.u8()?,
                    commit_lsn: r.u64()?,
                    end_lsn: r.u64()?,
                    commit_ts: r.i64()?,
                }
            }
            b'A' => {
                needs(2)?;
                let xid = r.u32()?;
                let subxid = r.u32()?;
                let abort = if version >= 4 && self.options.parallel_streaming {
                    Some((r.u64()?, r.i64()?))
                } else {
                    None
                };
                Message::StreamAbort { xid, subxid, abort }
            }
            b'b' => {
                needs(3)?;
                Message::BeginPrepare {
                    prepare_lsn: r.u64()?,
                    end_lsn: r.u64()?,
                    prepare_ts: r.i64()?,
                    xid: r.u32()?,
                    gid: r.string()?,
                }
            }
            b'P' | b'p' => {
                needs(3)?;
                let (flags, prepare_lsn, end_lsn, prepare_ts, xid, gid) =
                    (r.u8()?, r.u64()?, r.u64()?, r.i64()?, r.u32()?, r.string()?);
                if tag == b'P' {
                    Message::Prepare {
                        flags,
                        prepare_lsn,
                        end_lsn,
                        prepare_ts,
                        xid,
                        gid,
                    }
                } else {
                    Message::StreamPrepare {
                        flags,
                        prepare_lsn,
                        end_lsn,
                        prepare_ts,
                        xid,
                        gid,
                    }
                }
            }
            b'K' => {
                needs(3)?;
                Message::CommitPrepared {
                    flags: r.u8()?,
                    commit_lsn: r.u64()?,
                    end_lsn: r.u64()?,
                    commit_ts: r.i64()?,
                    xid: r.u32()?,
                    gid: r.string()?,
                }
            }
            b'r' => {
                needs(3)?;
                Message::RollbackPrepared {
                    flags: r.u8()?,
                    prepare_end_lsn: r.u64()?,
                    rollback_end_lsn: r.u64()?,
                    prepare_ts: r.i64()?,
                    rollback_ts: r.i64()?,
                    xid: r.u32()?,
                    gid: r.string()?,
                }
            }
            _ => return Err(DecodeError::UnknownMessage { tag }),
        };
        r.finish()?;
        Ok(msg)
    }
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
