//! The writer: a [`Message`] back to the bytes `proto.c` writes for it, the inverse of
//! [`Decoder::decode`](crate::Decoder::decode). For tests, fuzzing and benchmarks that need a
//! pgoutput stream without a server; a message's `xid` is written when present, as inside a
//! streamed transaction.

use bytes::Bytes;

use crate::message::{Column, CommitInfo, Message, OldTuple, PrepareInfo, Relation, Tuple};

#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn s(&mut self, v: &str) -> &mut Self {
        self.0.extend(v.as_bytes());
        self.0.push(0);
        self
    }
    fn len(&mut self, n: usize) -> &mut Self {
        self.i32(i32::try_from(n).unwrap_or(i32::MAX))
    }
    fn xid(&mut self, xid: Option<u32>) -> &mut Self {
        if let Some(x) = xid {
            self.u32(x);
        }
        self
    }
    fn tuple(&mut self, t: &Tuple) -> &mut Self {
        self.i16(i16::try_from(t.len()).unwrap_or(i16::MAX));
        for c in t {
            match c {
                Column::Null => {
                    self.u8(b'n');
                }
                Column::UnchangedToast => {
                    self.u8(b'u');
                }
                Column::Text(b) => {
                    self.u8(b't').len(b.len());
                    self.0.extend_from_slice(b);
                }
                Column::Binary(b) => {
                    self.u8(b'b').len(b.len());
                    self.0.extend_from_slice(b);
                }
            }
        }
        self
    }
    fn old(&mut self, o: &OldTuple) -> &mut Self {
        match o {
            OldTuple::Key(t) => self.u8(b'K').tuple(t),
            OldTuple::Full(t) => self.u8(b'O').tuple(t),
        }
    }
    fn commit(&mut self, c: &CommitInfo) -> &mut Self {
        self.u8(c.flags)
            .u64(c.commit_lsn)
            .u64(c.end_lsn)
            .i64(c.commit_ts)
    }
    fn prepare(&mut self, p: &PrepareInfo) -> &mut Self {
        self.u8(p.flags)
            .u64(p.prepare_lsn)
            .u64(p.end_lsn)
            .i64(p.prepare_ts)
            .u32(p.xid)
            .s(&p.gid)
    }
    fn relation(&mut self, r: &Relation) -> &mut Self {
        self.u32(r.relid)
            .s(&r.namespace)
            .s(&r.name)
            .u8(r.replica_identity)
            .i16(i16::try_from(r.columns.len()).unwrap_or(i16::MAX));
        for c in &r.columns {
            self.u8(c.flags).s(&c.name).u32(c.type_oid).i32(c.typmod);
        }
        self
    }
}

/// The bytes of `msg`. Stream Abort is written without the parallel-streaming fields.
pub fn encode(msg: &Message) -> Bytes {
    let mut w = W::default();
    match msg {
        Message::Begin {
            final_lsn,
            commit_ts,
            xid,
        } => w.u8(b'B').u64(*final_lsn).i64(*commit_ts).u32(*xid),
        Message::Commit(c) => w.u8(b'C').commit(c),
        Message::Origin { lsn, name } => w.u8(b'O').u64(*lsn).s(name),
        Message::Relation { xid, relation } => w.u8(b'R').xid(*xid).relation(relation),
        Message::Type {
            xid,
            oid,
            namespace,
            name,
        } => w.u8(b'Y').xid(*xid).u32(*oid).s(namespace).s(name),
        Message::Insert { xid, relid, new } => w.u8(b'I').xid(*xid).u32(*relid).u8(b'N').tuple(new),
        Message::Update {
            xid,
            relid,
            old,
            new,
        } => {
            w.u8(b'U').xid(*xid).u32(*relid);
            if let Some(o) = old {
                w.old(o);
            }
            w.u8(b'N').tuple(new)
        }
        Message::Delete { xid, relid, old } => w.u8(b'D').xid(*xid).u32(*relid).old(old),
        Message::Truncate { xid, flags, relids } => {
            w.u8(b'T').xid(*xid).len(relids.len()).u8(*flags);
            for r in relids {
                w.u32(*r);
            }
            &mut w
        }
        Message::Message {
            xid,
            transactional,
            lsn,
            prefix,
            content,
        } => {
            w.u8(b'M')
                .xid(*xid)
                .u8(u8::from(*transactional))
                .u64(*lsn)
                .s(prefix)
                .len(content.len());
            w.0.extend_from_slice(content);
            &mut w
        }
        Message::StreamStart { xid, first_segment } => {
            w.u8(b'S').u32(*xid).u8(u8::from(*first_segment))
        }
        Message::StreamStop => w.u8(b'E'),
        Message::StreamCommit { xid, commit } => w.u8(b'c').u32(*xid).commit(commit),
        Message::StreamAbort { xid, subxid, abort } => {
            w.u8(b'A').u32(*xid).u32(*subxid);
            if let Some((lsn, ts)) = abort {
                w.u64(*lsn).i64(*ts);
            }
            &mut w
        }
        Message::BeginPrepare {
            prepare_lsn,
            end_lsn,
            prepare_ts,
            xid,
            gid,
        } => w
            .u8(b'b')
            .u64(*prepare_lsn)
            .u64(*end_lsn)
            .i64(*prepare_ts)
            .u32(*xid)
            .s(gid),
        Message::Prepare(p) => w.u8(b'P').prepare(p),
        Message::StreamPrepare(p) => w.u8(b'p').prepare(p),
        Message::CommitPrepared { commit, xid, gid } => w.u8(b'K').commit(commit).u32(*xid).s(gid),
        Message::RollbackPrepared {
            flags,
            prepare_end_lsn,
            rollback_end_lsn,
            prepare_ts,
            rollback_ts,
            xid,
            gid,
        } => w
            .u8(b'r')
            .u8(*flags)
            .u64(*prepare_end_lsn)
            .u64(*rollback_end_lsn)
            .i64(*prepare_ts)
            .i64(*rollback_ts)
            .u32(*xid)
            .s(gid),
    };
    Bytes::from(w.0)
}
