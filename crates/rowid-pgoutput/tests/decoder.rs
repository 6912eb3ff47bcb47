//! The decoder against messages laid out as proto.c writes them.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use proptest::prelude::*;
use rowid_pgoutput::{
    Column, CommitInfo, DecodeError, Decoder, FlagBits, Message, OldTuple, Options, PrepareInfo,
    RelationCache, complete,
};

/// Builds messages the way proto.c writes them.
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn s(mut self, v: &str) -> Self {
        self.0.extend(v.as_bytes());
        self.0.push(0);
        self
    }
    fn col(self, c: &Column) -> Self {
        match c {
            Column::Null => self.u8(b'n'),
            Column::UnchangedToast => self.u8(b'u'),
            Column::Text(b) => {
                let mut w = self.u8(b't').i32(b.len() as i32);
                w.0.extend(b.iter());
                w
            }
            Column::Binary(b) => {
                let mut w = self.u8(b'b').i32(b.len() as i32);
                w.0.extend(b.iter());
                w
            }
        }
    }
    fn tuple(self, cols: &[Column]) -> Self {
        cols.iter()
            .fold(self.i16(cols.len() as i16), |w, c| w.col(c))
    }
    fn done(self) -> Bytes {
        Bytes::from(self.0)
    }
}

fn v1() -> Decoder {
    Decoder::new(Options {
        proto_version: 1,
        parallel_streaming: false,
    })
}

fn bin(v: &[u8]) -> Column {
    Column::Binary(Bytes::copy_from_slice(v))
}

/// Relation 16384 public.t (id int8 key, note text, big text), replica identity `ri`.
fn relation_msg(ri: u8) -> Bytes {
    W::default()
        .u8(b'R')
        .i32(16384)
        .s("public")
        .s("t")
        .u8(ri)
        .i16(3)
        .u8(1)
        .s("id")
        .i32(20)
        .i32(-1)
        .u8(if ri == b'f' { 1 } else { 0 })
        .s("note")
        .i32(25)
        .i32(-1)
        .u8(if ri == b'f' { 1 } else { 0 })
        .s("big")
        .i32(25)
        .i32(-1)
        .done()
}

#[test]
fn relation_and_changes_decode() {
    let mut d = v1();
    let Message::Relation {
        xid: None,
        relation,
    } = d.decode(relation_msg(b'd')).unwrap()
    else {
        panic!("relation expected")
    };
    assert_eq!(
        (
            relation.relid,
            relation.namespace.as_str(),
            relation.name.as_str()
        ),
        (16384, "public", "t")
    );
    assert_eq!(relation.replica_identity, b'd');
    assert_eq!(relation.columns[0].name, "id");
    assert_eq!(relation.columns[2].type_oid, 25);
    let id = bin(&7i64.to_be_bytes());
    let insert = W::default()
        .u8(b'I')
        .i32(16384)
        .u8(b'N')
        .tuple(&[
            id.clone(),
            Column::Text(Bytes::from_static(b"hi")),
            Column::Null,
        ])
        .done();
    assert_eq!(
        d.decode(insert).unwrap(),
        Message::Insert {
            xid: None,
            relid: 16384,
            new: vec![
                id.clone(),
                Column::Text(Bytes::from_static(b"hi")),
                Column::Null
            ]
        }
    );
    let update = W::default()
        .u8(b'U')
        .i32(16384)
        .u8(b'K')
        .tuple(&[id.clone(), Column::Null, Column::Null])
        .u8(b'N')
        .tuple(&[id.clone(), Column::Null, Column::UnchangedToast])
        .done();
    let Message::Update {
        old: Some(OldTuple::Key(k)),
        new,
        ..
    } = d.decode(update).unwrap()
    else {
        panic!("update with key expected")
    };
    assert_eq!(k[0], id);
    assert_eq!(new[2], Column::UnchangedToast, "'u' is kept, never NULL");
    let one_column = |kind: u8, tuple_kind: u8| {
        W::default()
            .u8(kind)
            .i32(16384)
            .u8(tuple_kind)
            .tuple(std::slice::from_ref(&id))
            .done()
    };
    let plain = one_column(b'U', b'N');
    assert!(matches!(
        d.decode(plain).unwrap(),
        Message::Update { old: None, .. }
    ));
    let delete = one_column(b'D', b'O');
    assert!(matches!(
        d.decode(delete).unwrap(),
        Message::Delete {
            old: OldTuple::Full(_),
            ..
        }
    ));
    let truncate = W::default().u8(b'T').i32(2).u8(1).i32(1).i32(2).done();
    assert_eq!(
        d.decode(truncate).unwrap(),
        Message::Truncate {
            xid: None,
            flags: 1,
            relids: vec![1, 2]
        }
    );
    let begin = W::default().u8(b'B').i64(100).i64(5).i32(9).done();
    assert_eq!(
        d.decode(begin).unwrap(),
        Message::Begin {
            final_lsn: 100,
            commit_ts: 5,
            xid: 9
        }
    );
    let msg = W::default().u8(b'M').u8(1).i64(7).s("pfx").i32(3).done();
    let mut msg = msg.to_vec();
    msg.extend(b"abc");
    assert!(matches!(
        d.decode(Bytes::from(msg)).unwrap(),
        Message::Message {
            transactional: true,
            ..
        }
    ));
}

#[test]
fn streamed_transactions_carry_xids() {
    let mut d = Decoder::new(Options {
        proto_version: 2,
        parallel_streaming: false,
    });
    assert_eq!(
        d.decode(W::default().u8(b'S').i32(77).u8(1).done())
            .unwrap(),
        Message::StreamStart {
            xid: 77,
            first_segment: true
        }
    );
    // Inside a streamed transaction a change carries its xid before the relation.
    let insert = |xid: Option<i32>| {
        let w = W::default().u8(b'I');
        let w = match xid {
            Some(x) => w.i32(x),
            None => w,
        };
        w.i32(16384).u8(b'N').tuple(&[Column::Null]).done()
    };
    assert!(matches!(
        d.decode(insert(Some(77))).unwrap(),
        Message::Insert { xid: Some(77), .. }
    ));
    assert_eq!(
        d.decode(W::default().u8(b'E').done()).unwrap(),
        Message::StreamStop
    );
    assert!(matches!(
        d.decode(insert(None)).unwrap(),
        Message::Insert { xid: None, .. }
    ));
    let abort = W::default().u8(b'A').i32(77).i32(78).done();
    assert_eq!(
        d.decode(abort).unwrap(),
        Message::StreamAbort {
            xid: 77,
            subxid: 78,
            abort: None
        }
    );
    let mut p4 = Decoder::new(Options {
        proto_version: 4,
        parallel_streaming: true,
    });
    let abort = W::default().u8(b'A').i32(77).i32(78).i64(5).i64(6).done();
    assert_eq!(
        p4.decode(abort).unwrap(),
        Message::StreamAbort {
            xid: 77,
            subxid: 78,
            abort: Some((5, 6))
        }
    );
}

/// PostgreSQL 18 sends a Stream Abort on a protocol 1 session that never streams (for a
/// transaction it found aborted over `logical_decoding_work_mem`; a live PostgreSQL 18 sent
/// exactly these 9 bytes, `41 00005253 00005254`): decoded, with the protocol 1 layout, while
/// the other streaming messages stay protocol 2+.
#[test]
fn a_stream_abort_outside_a_stream_decodes_on_protocol_1() {
    let seen = Bytes::from_static(&[0x41, 0, 0, 0x52, 0x53, 0, 0, 0x52, 0x54]);
    assert_eq!(
        v1().decode(seen),
        Ok(Message::StreamAbort {
            xid: 0x5253,
            subxid: 0x5254,
            abort: None
        })
    );
    for tag in [b'S', b'E', b'c'] {
        let msg = W::default().u8(tag).i32(77).u8(1).done();
        assert_eq!(
            v1().decode(msg),
            Err(DecodeError::ProtocolVersion { tag, version: 1 })
        );
    }
    // Its length is still checked.
    let short = W::default().u8(b'A').i32(77).done();
    assert!(v1().decode(short).is_err());
    let long = W::default().u8(b'A').i32(77).i32(78).u8(0).done();
    assert!(v1().decode(long).is_err());
}

#[test]
fn two_phase_messages_need_protocol_3() {
    // Prepare, Stream Prepare and Commit Prepared share one layout: flags, three LSN or
    // timestamp words, xid, gid.
    let two_phase = |tag: u8| {
        W::default()
            .u8(tag)
            .u8(0)
            .i64(1)
            .i64(2)
            .i64(3)
            .i32(4)
            .s("gid-1")
            .done()
    };
    let prepare = two_phase(b'P');
    assert_eq!(
        v1().decode(prepare.clone()),
        Err(DecodeError::ProtocolVersion {
            tag: b'P',
            version: 1
        })
    );
    let mut d = Decoder::new(Options {
        proto_version: 3,
        parallel_streaming: false,
    });
    let info = PrepareInfo {
        flags: 0,
        prepare_lsn: 1,
        end_lsn: 2,
        prepare_ts: 3,
        xid: 4,
        gid: "gid-1".into(),
    };
    assert_eq!(d.decode(prepare).unwrap(), Message::Prepare(info.clone()));
    assert_eq!(
        d.decode(two_phase(b'p')).unwrap(),
        Message::StreamPrepare(info)
    );
    let commit = two_phase(b'K');
    assert_eq!(
        d.decode(commit).unwrap(),
        Message::CommitPrepared {
            commit: CommitInfo {
                flags: 0,
                commit_lsn: 1,
                end_lsn: 2,
                commit_ts: 3,
            },
            xid: 4,
            gid: "gid-1".into(),
        }
    );
}

#[test]
fn malformed_messages_are_errors_with_offsets() {
    let mut d = v1();
    assert_eq!(
        d.decode(Bytes::new()),
        Err(DecodeError::Truncated { offset: 0 })
    );
    assert_eq!(
        d.decode(Bytes::from_static(b"Z")),
        Err(DecodeError::UnknownMessage { tag: b'Z' })
    );
    let short = W::default().u8(b'B').i64(1).done();
    assert_eq!(d.decode(short), Err(DecodeError::Truncated { offset: 9 }));
    let trailing = W::default().u8(b'B').i64(1).i64(2).i32(3).u8(0).done();
    assert_eq!(
        d.decode(trailing),
        Err(DecodeError::TrailingBytes { offset: 21 })
    );
    let bad_kind = W::default().u8(b'I').i32(1).u8(b'N').i16(1).u8(b'x').done();
    assert!(matches!(
        d.decode(bad_kind),
        Err(DecodeError::Unexpected {
            offset: 8,
            found: b'x',
            ..
        })
    ));
    let negative = W::default()
        .u8(b'I')
        .i32(1)
        .u8(b'N')
        .i16(1)
        .u8(b't')
        .i32(-5)
        .done();
    assert_eq!(
        d.decode(negative),
        Err(DecodeError::NegativeLength { offset: 9 })
    );
    let huge = W::default().u8(b'T').i32(i32::MAX).u8(0).done();
    assert!(
        matches!(d.decode(huge), Err(DecodeError::Truncated { .. })),
        "no allocation for a huge count"
    );
    let huge_tuple = W::default().u8(b'I').i32(1).u8(b'N').i16(i16::MAX).done();
    assert!(matches!(
        d.decode(huge_tuple),
        Err(DecodeError::Truncated { .. })
    ));
    let no_old = W::default().u8(b'D').i32(1).u8(b'N').tuple(&[]).done();
    assert!(matches!(
        d.decode(no_old),
        Err(DecodeError::Unexpected {
            expected: "'K' or 'O'",
            ..
        })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// No input panics, whatever the options.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96), version in 1u32..=4, parallel in any::<bool>()) {
        let mut d = Decoder::new(Options { proto_version: version, parallel_streaming: parallel });
        let _ = d.decode(Bytes::from(bytes));
    }
}

// ---------------------------------------------------------------------------------------
// After-images: replica identity x TOASTed column x what the UPDATE changed.
// ---------------------------------------------------------------------------------------

fn big() -> Column {
    Column::Binary(Bytes::from(vec![b'x'; 4000]))
}

struct Case {
    name: &'static str,
    ri: u8,
    old: Option<OldTuple>,
    new: Vec<Column>,
    complete_key: bool,
    missing: Vec<&'static str>,
}

#[test]
fn after_images_are_completed_exactly_or_refused_by_name() {
    let id = bin(&1i64.to_be_bytes());
    let id2 = bin(&2i64.to_be_bytes());
    let note = Column::Binary(Bytes::from_static(b"n2"));
    let u = Column::UnchangedToast;
    let full = |cols: Vec<Column>| Some(OldTuple::Full(cols));
    let key = |cols: Vec<Column>| Some(OldTuple::Key(cols));
    let nul = Column::Null;
    let case = |name, ri, old, new, complete_key, missing: &[&'static str]| Case {
        name,
        ri,
        old,
        new,
        complete_key,
        missing: missing.to_vec(),
    };
    #[rustfmt::skip]
    let cases = vec![
        // REPLICA IDENTITY FULL: 'O' carries everything; every 'u' is backfilled.
        case("full, toasted non-key, sibling update", b'f', full(vec![id.clone(), nul.clone(), big()]), vec![id.clone(), note.clone(), u.clone()], true, &[]),
        case("full, toasted non-key, key update", b'f', full(vec![id.clone(), nul.clone(), big()]), vec![id2.clone(), note.clone(), u.clone()], true, &[]),
        case("full, toasted key, sibling update", b'f', full(vec![big(), nul.clone(), big()]), vec![u.clone(), note.clone(), u.clone()], true, &[]),
        // DEFAULT / INDEX: no old tuple unless the key changed or is stored out of line.
        case("default, toasted non-key, sibling update", b'd', None, vec![id.clone(), note.clone(), u.clone()], true, &["big"]),
        case("default, toasted non-key, key update", b'd', key(vec![id.clone(), nul.clone(), nul.clone()]), vec![id2.clone(), note.clone(), u.clone()], true, &["big"]),
        case("default, toasted key, sibling update", b'd', key(vec![big(), nul.clone(), nul.clone()]), vec![u.clone(), note.clone(), nul.clone()], true, &[]),
        case("index, toasted key and non-key, sibling update", b'i', key(vec![big(), nul.clone(), nul.clone()]), vec![u.clone(), note.clone(), u.clone()], true, &["big"]),
        // NOTHING: never an old tuple.
        case("nothing, toasted non-key, sibling update", b'n', None, vec![id.clone(), note.clone(), u.clone()], true, &["big"]),
        case("nothing, toasted key, sibling update", b'n', None, vec![u.clone(), note.clone(), nul.clone()], false, &["id"]),
    ];
    for case in cases {
        let mut d = v1();
        let Message::Relation { relation, .. } = d.decode(relation_msg(case.ri)).unwrap() else {
            unreachable!()
        };
        let mut cache = RelationCache::default();
        cache.apply(relation.clone());
        let rel = cache.get(16384).unwrap();
        let image = complete(rel, &FlagBits::default(), case.old.as_ref(), &case.new);
        let names: Vec<&str> = image
            .missing
            .iter()
            .map(|&i| rel.columns[i].name.as_str())
            .collect();
        assert_eq!(names, case.missing, "{}", case.name);
        assert!(
            image
                .columns
                .iter()
                .enumerate()
                .all(|(i, c)| (*c == Column::UnchangedToast) == image.missing.contains(&i)),
            "{}",
            case.name
        );
        // The identity column (id) is needed for the identity; the predicate column (big) by
        // a filter.
        assert_eq!(
            image.require(rel, &[0]).is_ok(),
            case.complete_key,
            "{}",
            case.name
        );
        match image.require(rel, &[0, 2]) {
            Ok(_) => assert!(case.missing.is_empty(), "{}", case.name),
            Err(e) => {
                assert_eq!(e.columns, case.missing, "{}", case.name);
                assert!(e.to_string().contains("public.t"), "{}", case.name);
            }
        }
    }
}

#[test]
fn configured_flag_bits_are_read_and_unknown_bits_tolerated() {
    let rel = W::default()
        .u8(b'R')
        .i32(1)
        .s("")
        .s("t")
        .u8(b'f')
        .i16(2)
        .u8(0x01 | 0x02 | 0x80)
        .s("id")
        .i32(20)
        .i32(-1)
        .u8(0x01 | 0x80)
        .s("v")
        .i32(25)
        .i32(-1)
        .done();
    let Message::Relation { relation, .. } = v1().decode(rel).unwrap() else {
        unreachable!()
    };
    let flags = FlagBits {
        primary_key: Some(0x02),
        ..FlagBits::default()
    };
    assert_eq!(flags.in_primary_key(&relation.columns[0]), Some(true));
    assert_eq!(flags.in_primary_key(&relation.columns[1]), Some(false));
    assert!(
        flags.in_replica_identity(&relation.columns[1]),
        "FULL marks every column"
    );
    assert_eq!(
        FlagBits::default().in_primary_key(&relation.columns[0]),
        None,
        "not carried by default"
    );
    assert_eq!(relation.namespace, "", "empty namespace means pg_catalog");
}

// ---------------------------------------------------------------------------------------
// The writer: the inverse of the decoder.
// ---------------------------------------------------------------------------------------

#[test]
fn the_writer_lays_messages_out_as_proto_c_does() {
    // Hand-laid messages of this file, decoded and written again, byte for byte.
    for ri in [b'd', b'f'] {
        let bytes = relation_msg(ri);
        let msg = v1().decode(bytes.clone()).unwrap();
        assert_eq!(rowid_pgoutput::encode(&msg), bytes);
    }
    let insert = W::default()
        .u8(b'I')
        .i32(16384)
        .u8(b'N')
        .tuple(&[
            bin(&1i64.to_be_bytes()),
            Column::Null,
            Column::UnchangedToast,
        ])
        .done();
    let msg = v1().decode(insert.clone()).unwrap();
    assert_eq!(rowid_pgoutput::encode(&msg), insert);
}

fn column() -> impl Strategy<Value = Column> {
    prop_oneof![
        Just(Column::Null),
        Just(Column::UnchangedToast),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(|v| Column::Text(Bytes::from(v))),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(|v| Column::Binary(Bytes::from(v))),
    ]
}

fn tuple() -> impl Strategy<Value = Vec<Column>> {
    prop::collection::vec(column(), 0..5)
}

fn name() -> impl Strategy<Value = String> {
    "[a-z_]{0,8}"
}

/// Every message of protocol 1.
fn message_v1() -> impl Strategy<Value = Message> {
    let old = prop_oneof![
        tuple().prop_map(OldTuple::Key),
        tuple().prop_map(OldTuple::Full)
    ];
    prop_oneof![
        (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(final_lsn, commit_ts, xid)| {
            Message::Begin {
                final_lsn,
                commit_ts,
                xid,
            }
        }),
        (any::<u8>(), any::<u64>(), any::<u64>(), any::<i64>()).prop_map(
            |(flags, commit_lsn, end_lsn, commit_ts)| {
                Message::Commit(CommitInfo {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_ts,
                })
            }
        ),
        (any::<u64>(), name()).prop_map(|(lsn, name)| Message::Origin { lsn, name }),
        (
            any::<u32>(),
            name(),
            name(),
            prop::sample::select(vec![b'd', b'n', b'f', b'i']),
            prop::collection::vec((any::<u8>(), name(), any::<u32>(), any::<i32>()), 0..4)
        )
            .prop_map(
                |(relid, namespace, n, replica_identity, cols)| Message::Relation {
                    xid: None,
                    relation: rowid_pgoutput::Relation {
                        relid,
                        namespace,
                        name: n,
                        replica_identity,
                        columns: cols
                            .into_iter()
                            .map(
                                |(flags, name, type_oid, typmod)| rowid_pgoutput::RelationColumn {
                                    flags,
                                    name,
                                    type_oid,
                                    typmod
                                }
                            )
                            .collect(),
                    },
                }
            ),
        (any::<u32>(), name(), name()).prop_map(|(oid, namespace, name)| Message::Type {
            xid: None,
            oid,
            namespace,
            name
        }),
        (any::<u32>(), tuple()).prop_map(|(relid, new)| Message::Insert {
            xid: None,
            relid,
            new
        }),
        (any::<u32>(), prop::option::of(old.clone()), tuple()).prop_map(|(relid, old, new)| {
            Message::Update {
                xid: None,
                relid,
                old,
                new,
            }
        }),
        (any::<u32>(), old).prop_map(|(relid, old)| Message::Delete {
            xid: None,
            relid,
            old
        }),
        (any::<u8>(), prop::collection::vec(any::<u32>(), 0..4)).prop_map(|(flags, relids)| {
            Message::Truncate {
                xid: None,
                flags,
                relids,
            }
        }),
        (
            any::<bool>(),
            any::<u64>(),
            name(),
            prop::collection::vec(any::<u8>(), 0..16)
        )
            .prop_map(|(transactional, lsn, prefix, content)| Message::Message {
                xid: None,
                transactional,
                lsn,
                prefix,
                content: Bytes::from(content)
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// decode(encode(m)) = m for every protocol 1 message.
    #[test]
    fn written_messages_decode_to_themselves(msg in message_v1()) {
        let bytes = rowid_pgoutput::encode(&msg);
        prop_assert_eq!(v1().decode(bytes).unwrap(), msg);
    }
}
