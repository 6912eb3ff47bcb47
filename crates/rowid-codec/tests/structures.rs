//! Property tests of the structural families (spec/wire-format.md §6.3–§6.7) against Rust
//! models of PostgreSQL's comparators: `array_cmp`, `range_cmp`, `multirange_cmp`,
//! `record_cmp` and jsonb equality. Elements come from the scalar model in `rowid_testkit`
//! (int4, text under C, numeric with its equal spellings), so element equality and order are
//! the ones the scalar properties already prove.
//!
//! Each property also checks strict round trips, and the send-format parsers against send
//! bytes built here from the model. The servers' own comparators are the final oracle:
//! `rowid-vectors/tests/structural_oracle.rs`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Ordering;

use proptest::prelude::*;
use rowid_codec::send::owned_from_send;
use rowid_codec::structure::{ArrayDim, Shape};
use rowid_codec::value::{
    ArrayValue, JsonbValue, MultirangeValue, RangeBound, RangeBounds, RangeValue, RecordValue,
};
use rowid_codec::{Domain, NumericSign, OwnedField, OwnedValue, TypeTag, decode, encode_identity};
use rowid_testkit::model::{input, model_cmp, pair};

const CASES: u32 = 4_000;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig::with_cases(cases)
}

/// Element families: the order-preserving scalars with the most interesting equality.
const ELEMENTS: [TypeTag; 3] = [TypeTag::Int4, TypeTag::Text, TypeTag::Numeric];

fn encode(v: &OwnedValue) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, Domain::ScanKey, &[(v.tag(), Some(v.as_value()))])
        .unwrap_or_else(|e| panic!("{v:?} does not encode: {e}"));
    buf
}

/// Strict decoding returns the canonical tree, which re-encodes to the same bytes; the three
/// decoders agree on it.
fn round_trip(bytes: &[u8]) {
    let d = decode(bytes).unwrap();
    let mut again = Vec::new();
    d.encode(&mut again).unwrap();
    assert_eq!(again, bytes);
    assert!(rowid_codec::validate(bytes).is_ok());
    rowid_testkit::decoders::check_agree(bytes).unwrap_or_else(|e| panic!("{e}"));
}

fn check_pair(a: &OwnedValue, b: &OwnedValue, model: Ordering, order_claimed: bool) {
    let (ea, eb) = (encode(a), encode(b));
    round_trip(&ea);
    round_trip(&eb);
    assert_eq!(
        ea == eb,
        model == Ordering::Equal,
        "equality: model {model:?} for {a:?} vs {b:?}"
    );
    if order_claimed {
        assert_eq!(ea.cmp(&eb), model, "order for {a:?} vs {b:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------

/// An element: `None` is NULL.
type Elem = Option<OwnedValue>;

/// Two elements or fields: NULL after every value, two NULLs equal (`array_cmp`,
/// `record_cmp`).
fn elem_cmp(x: &Elem, y: &Elem) -> Ordering {
    match (x, y) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => model_cmp(x, y),
    }
}

/// `array_cmp`: elements (NULL after values), then count, ndims, dims, lower bounds.
fn model_array_cmp(a: &(Vec<(i32, i32)>, Vec<Elem>), b: &(Vec<(i32, i32)>, Vec<Elem>)) -> Ordering {
    for (x, y) in a.1.iter().zip(&b.1) {
        let c = elem_cmp(x, y);
        if c != Ordering::Equal {
            return c;
        }
    }
    a.1.len()
        .cmp(&b.1.len())
        .then(a.0.len().cmp(&b.0.len()))
        .then_with(|| {
            let lens = |d: &[(i32, i32)]| d.iter().map(|x| x.0).collect::<Vec<_>>();
            let lows = |d: &[(i32, i32)]| d.iter().map(|x| x.1).collect::<Vec<_>>();
            lens(&a.0)
                .cmp(&lens(&b.0))
                .then(lows(&a.0).cmp(&lows(&b.0)))
        })
}

/// A model bound: `None` infinite, else (value, inclusive).
type MBound = Option<(OwnedValue, bool)>;
type MRange = Option<(MBound, MBound)>;

/// `range_cmp_bounds`.
fn bound_cmp(a: &MBound, b: &MBound, lower: bool) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => {
            if lower {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        }
        (Some(_), None) => {
            if lower {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (Some((x, xi)), Some((y, yi))) => model_cmp(x, y).then_with(|| match (xi, yi) {
            (true, true) | (false, false) => Ordering::Equal,
            // An exclusive lower bound starts just above its value; an exclusive upper bound
            // ends just below it.
            (false, true) => {
                if lower {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            (true, false) => {
                if lower {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
        }),
    }
}

/// `range_cmp`: empty first, then lower bounds, then upper bounds.
fn model_range_cmp(a: &MRange, b: &MRange) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((al, au)), Some((bl, bu))) => {
            bound_cmp(al, bl, true).then_with(|| bound_cmp(au, bu, false))
        }
    }
}

/// `multirange_cmp`: ranges pairwise, then fewer ranges first.
fn model_multirange_cmp(a: &[MRange], b: &[MRange]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c = model_range_cmp(x, y);
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// `record_cmp`: fields left to right, NULL after values, two NULLs equal.
fn model_record_cmp(a: &[Elem], b: &[Elem]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c = elem_cmp(x, y);
        if c != Ordering::Equal {
            return c;
        }
    }
    Ordering::Equal
}

// ---------------------------------------------------------------------------------------
// Conversions to codec values
// ---------------------------------------------------------------------------------------

fn to_array(tag: TypeTag, a: &(Vec<(i32, i32)>, Vec<Elem>)) -> OwnedValue {
    OwnedValue::Array(ArrayValue {
        element: tag,
        dims: a
            .0
            .iter()
            .map(|&(len, lower)| ArrayDim { len, lower })
            .collect(),
        elements: a.1.clone(),
    })
}

fn to_bound(b: &MBound) -> RangeBound {
    match b {
        None => RangeBound::Infinite,
        Some((v, true)) => RangeBound::Inclusive(v.clone()),
        Some((v, false)) => RangeBound::Exclusive(v.clone()),
    }
}

fn to_bounds(r: &(MBound, MBound)) -> RangeBounds {
    RangeBounds {
        lower: to_bound(&r.0),
        upper: to_bound(&r.1),
    }
}

fn to_range(tag: TypeTag, r: &MRange) -> OwnedValue {
    OwnedValue::Range(Box::new(RangeValue {
        subtype: tag,
        bounds: r.as_ref().map(to_bounds),
    }))
}

fn to_record(fields: &[(TypeTag, Elem)]) -> OwnedValue {
    OwnedValue::Record(RecordValue {
        fields: fields
            .iter()
            .map(|(tag, v)| OwnedField {
                tag: *tag,
                value: v.clone(),
            })
            .collect(),
    })
}

// ---------------------------------------------------------------------------------------
// Send formats built from the model (array_send, range_send, record_send, multirange_send)
// ---------------------------------------------------------------------------------------

/// The scalar send format of an input (the model's side of `typsend`).
fn scalar_send(i: &OwnedValue) -> Vec<u8> {
    match i {
        OwnedValue::Int4(v) => v.to_be_bytes().to_vec(),
        OwnedValue::Text(t) => t.clone(),
        OwnedValue::Numeric(n) => {
            let sign_word: u16 = match n.sign {
                NumericSign::Positive => 0x0000,
                NumericSign::Negative => 0x4000,
                NumericSign::NaN => 0xC000,
                NumericSign::PositiveInfinity => 0xD000,
                NumericSign::NegativeInfinity => 0xF000,
            };
            let mut out = Vec::new();
            out.extend_from_slice(&(n.digits.len() as i16).to_be_bytes());
            out.extend_from_slice(&n.weight.to_be_bytes());
            out.extend_from_slice(&sign_word.to_be_bytes());
            out.extend_from_slice(&0i16.to_be_bytes());
            for d in &n.digits {
                out.extend_from_slice(&d.to_be_bytes());
            }
            out
        }
        other => panic!("no send model for {other:?}"),
    }
}

fn item(out: &mut Vec<u8>, bytes: Option<Vec<u8>>) {
    match bytes {
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(b) => {
            out.extend_from_slice(&(b.len() as i32).to_be_bytes());
            out.extend_from_slice(&b);
        }
    }
}

fn array_send(a: &(Vec<(i32, i32)>, Vec<Elem>)) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(a.0.len() as i32).to_be_bytes());
    out.extend_from_slice(&i32::from(a.1.iter().any(Option::is_none)).to_be_bytes());
    out.extend_from_slice(&23u32.to_be_bytes()); // element type OID: ignored by the parser
    for (len, lower) in &a.0 {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&lower.to_be_bytes());
    }
    for e in &a.1 {
        item(&mut out, e.as_ref().map(scalar_send));
    }
    out
}

fn range_send(r: &MRange) -> Vec<u8> {
    let Some((lower, upper)) = r else {
        return vec![0x01];
    };
    let mut flags = 0u8;
    match lower {
        None => flags |= 0x08,
        Some((_, true)) => flags |= 0x02,
        Some(_) => {}
    }
    match upper {
        None => flags |= 0x10,
        Some((_, true)) => flags |= 0x04,
        Some(_) => {}
    }
    let mut out = vec![flags];
    for (v, _) in [lower, upper].into_iter().flatten() {
        item(&mut out, Some(scalar_send(v)));
    }
    out
}

fn multirange_send(m: &[MRange]) -> Vec<u8> {
    let mut out = (m.len() as i32).to_be_bytes().to_vec();
    for r in m {
        item(&mut out, Some(range_send(r)));
    }
    out
}

fn record_send(fields: &[(TypeTag, Elem)]) -> Vec<u8> {
    let mut out = (fields.len() as i32).to_be_bytes().to_vec();
    for (_, v) in fields {
        out.extend_from_slice(&0u32.to_be_bytes()); // column type OID: ignored
        item(&mut out, v.as_ref().map(scalar_send));
    }
    out
}

/// The equality/order check of a model pair, plus the send format of its first value.
fn agree<M>(
    shape: &Shape,
    (a, b): (&M, &M),
    to_value: impl Fn(&M) -> OwnedValue,
    model: Ordering,
    send: impl Fn(&M) -> Vec<u8>,
) {
    let (va, vb) = (to_value(a), to_value(b));
    check_pair(&va, &vb, model, true);
    assert_send_matches(shape, &send(a), &va);
}

fn assert_send_matches(shape: &Shape, send: &[u8], value: &OwnedValue) {
    let parsed = owned_from_send(shape, send).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    assert_eq!(encode(&parsed), encode(value), "send format of {value:?}");
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

/// A pair of elements of `tag`: often equal (possibly in another spelling), sometimes NULL.
fn elem_pair(tag: TypeTag) -> BoxedStrategy<(Elem, Elem)> {
    prop_oneof![
        8 => pair(tag).prop_map(|(a, b)| (Some(a), Some(b))),
        1 => Just((None, None)),
        1 => input(tag).prop_map(|a| (Some(a), None)),
        1 => input(tag).prop_map(|b| (None, Some(b))),
    ]
    .boxed()
}

fn dims_for(n: usize) -> BoxedStrategy<Vec<(i32, i32)>> {
    let lower = prop_oneof![Just(1), Just(0), Just(-1), Just(2)];
    if n == 0 {
        return Just(Vec::new()).boxed();
    }
    let one = lower.clone().prop_map(move |l| vec![(n as i32, l)]);
    if n == 4 {
        prop_oneof![
            one,
            (lower.clone(), lower).prop_map(|(a, b)| vec![(2, a), (2, b)])
        ]
        .boxed()
    } else {
        one.boxed()
    }
}

type ArrayModel = (Vec<(i32, i32)>, Vec<Elem>);

fn array_pair(tag: TypeTag) -> BoxedStrategy<(ArrayModel, ArrayModel)> {
    (0usize..=4, 0usize..=4, any::<bool>())
        .prop_flat_map(move |(n, m, same_len)| {
            let m = if same_len { n } else { m };
            (
                prop::collection::vec(elem_pair(tag), n.max(m)),
                dims_for(n),
                dims_for(m),
            )
                .prop_map(move |(pairs, da, db)| {
                    let a = pairs.iter().take(n).map(|p| p.0.clone()).collect();
                    let b = pairs.iter().take(m).map(|p| p.1.clone()).collect();
                    ((da, a), (db, b))
                })
        })
        .boxed()
}

fn bound_pair(tag: TypeTag) -> BoxedStrategy<(MBound, MBound)> {
    prop_oneof![
        6 => (pair(tag), any::<bool>(), any::<bool>())
            .prop_map(|((a, b), ia, ib)| (Some((a, ia)), Some((b, ib)))),
        2 => (pair(tag), any::<bool>()).prop_map(|((a, b), i)| (Some((a, i)), Some((b, i)))),
        1 => Just((None, None)),
        1 => (input(tag), any::<bool>()).prop_map(|(a, i)| (Some((a, i)), None)),
    ]
    .boxed()
}

fn range_pair(tag: TypeTag) -> BoxedStrategy<(MRange, MRange)> {
    prop_oneof![
        8 => (bound_pair(tag), bound_pair(tag))
            .prop_map(|((la, lb), (ua, ub))| (Some((la, ua)), Some((lb, ub)))),
        1 => Just((None, None)),
        1 => (bound_pair(tag), bound_pair(tag)).prop_map(|((la, _), (ua, _))| (Some((la, ua)), None)),
    ]
    .boxed()
}

fn jsonb_leaf() -> BoxedStrategy<(JsonbValue, JsonbValue)> {
    prop_oneof![
        Just((JsonbValue::Null, JsonbValue::Null)),
        any::<bool>().prop_map(|b| (JsonbValue::Bool(b), JsonbValue::Bool(b))),
        any::<bool>().prop_map(|b| (JsonbValue::Bool(b), JsonbValue::Null)),
        pair(TypeTag::Numeric)
            .prop_filter("jsonb numbers are finite", |(a, b)| finite(a) && finite(b))
            .prop_map(|(a, b)| (number(&a), number(&b))),
        pair(TypeTag::Text).prop_map(|(a, b)| (string(&a), string(&b))),
    ]
    .boxed()
}

fn finite(i: &OwnedValue) -> bool {
    matches!(i, OwnedValue::Numeric(n) if matches!(n.sign, NumericSign::Positive | NumericSign::Negative))
}

fn number(i: &OwnedValue) -> JsonbValue {
    match i {
        OwnedValue::Numeric(n) => JsonbValue::Number(n.clone()),
        _ => unreachable!(),
    }
}

fn string(i: &OwnedValue) -> JsonbValue {
    match i {
        OwnedValue::Text(t) => JsonbValue::String(t.clone()),
        _ => unreachable!(),
    }
}

/// Pairs of jsonb values, mostly alike; objects are built with `JsonbValue::object` from
/// pairs in arbitrary order with duplicates, as `jsonb_in` normalises them.
fn jsonb_pair() -> BoxedStrategy<(JsonbValue, JsonbValue)> {
    jsonb_leaf()
        .prop_recursive(3, 24, 4, |inner| {
            let key = prop::sample::select(vec![&b""[..], b"a", b"b", b"aa", b"ab"]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|items| {
                    let (a, b): (Vec<_>, Vec<_>) = items.into_iter().unzip();
                    (JsonbValue::Array(a), JsonbValue::Array(b))
                }),
                (prop::collection::vec((key, inner), 0..4), any::<u64>()).prop_map(
                    |(pairs, seed)| {
                        let a: Vec<_> = pairs
                            .iter()
                            .map(|(k, (va, _))| (k.to_vec(), va.clone()))
                            .collect();
                        let mut b: Vec<_> = pairs
                            .iter()
                            .map(|(k, (_, vb))| (k.to_vec(), vb.clone()))
                            .collect();
                        // Reorder b's distinct keys (the last duplicate must stay last).
                        if seed % 2 == 0 {
                            b.reverse();
                            dedup_keep_last_reversed(&mut b);
                        }
                        (JsonbValue::object(a), JsonbValue::object(b))
                    }
                ),
            ]
        })
        .boxed()
}

/// After reversing, keep only the first occurrence of each key (the original last one).
fn dedup_keep_last_reversed(pairs: &mut Vec<(Vec<u8>, JsonbValue)>) {
    let mut seen = Vec::new();
    pairs.retain(|(k, _)| {
        if seen.contains(k) {
            false
        } else {
            seen.push(k.clone());
            true
        }
    });
}

/// jsonb equality: same types, numbers as numerics, same keys and values.
fn model_jsonb_eq(a: &JsonbValue, b: &JsonbValue) -> bool {
    match (a, b) {
        (JsonbValue::Null, JsonbValue::Null) => true,
        (JsonbValue::Bool(x), JsonbValue::Bool(y)) => x == y,
        (JsonbValue::String(x), JsonbValue::String(y)) => x == y,
        (JsonbValue::Number(x), JsonbValue::Number(y)) => {
            let n = |n: &rowid_codec::OwnedNumeric| OwnedValue::Numeric(n.clone());
            model_cmp(&n(x), &n(y)) == Ordering::Equal
        }
        (JsonbValue::Array(x), JsonbValue::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| model_jsonb_eq(p, q))
        }
        (JsonbValue::Object(x), JsonbValue::Object(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| {
                    y.iter()
                        .find(|(k2, _)| k2 == k)
                        .is_some_and(|(_, v2)| model_jsonb_eq(v, v2))
                })
        }
        _ => false,
    }
}

/// An element family and a strategy built for it.
fn per_element<T: std::fmt::Debug>(
    strategy: fn(TypeTag) -> BoxedStrategy<T>,
) -> impl Strategy<Value = (TypeTag, T)> {
    prop::sample::select(ELEMENTS.to_vec()).prop_flat_map(move |t| (Just(t), strategy(t)))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn agree_array(
        (tag, (a, b)) in per_element(array_pair),
    ) {
        let shape = Shape::Array(Box::new(Shape::Scalar(tag)));
        agree(&shape, (&a, &b), |m| to_array(tag, m), model_array_cmp(&a, &b), array_send);
    }

    #[test]
    fn agree_range(
        (tag, (a, b)) in per_element(range_pair),
    ) {
        let shape = Shape::Range(Box::new(Shape::Scalar(tag)));
        agree(&shape, (&a, &b), |m| to_range(tag, m), model_range_cmp(&a, &b), range_send);
    }

    #[test]
    fn agree_multirange(
        (tag, pairs, keep) in prop::sample::select(ELEMENTS.to_vec()).prop_flat_map(|t| {
            (Just(t), prop::collection::vec(range_pair(t), 0..4), 0usize..=4)
        }),
    ) {
        // A multirange holds no empty range.
        let a: Vec<MRange> = pairs.iter().filter_map(|p| p.0.clone()).map(Some).collect();
        let mut b: Vec<MRange> = pairs.iter().filter_map(|p| p.1.clone()).map(Some).collect();
        b.truncate(keep);
        let to_multi = |m: &[MRange]| {
            OwnedValue::Multirange(MultirangeValue {
                subtype: tag,
                ranges: m.iter().flatten().map(to_bounds).collect(),
            })
        };
        let (va, vb) = (to_multi(&a), to_multi(&b));
        check_pair(&va, &vb, model_multirange_cmp(&a, &b), true);
        assert_send_matches(
            &Shape::Multirange(Box::new(Shape::Scalar(tag))),
            &multirange_send(&a),
            &va,
        );
    }

    #[test]
    fn agree_record(
        fields in prop::collection::vec(
            prop::sample::select(ELEMENTS.to_vec()).prop_flat_map(|t| (Just(t), elem_pair(t))),
            0..5,
        ),
    ) {
        let a: Vec<(TypeTag, Elem)> = fields.iter().map(|(t, (x, _))| (*t, x.clone())).collect();
        let b: Vec<(TypeTag, Elem)> = fields.iter().map(|(t, (_, y))| (*t, y.clone())).collect();
        let ea: Vec<Elem> = a.iter().map(|f| f.1.clone()).collect();
        let eb: Vec<Elem> = b.iter().map(|f| f.1.clone()).collect();
        let (va, vb) = (to_record(&a), to_record(&b));
        check_pair(&va, &vb, model_record_cmp(&ea, &eb), true);
        let shape = Shape::Record(a.iter().map(|(t, _)| Shape::Scalar(*t)).collect());
        assert_send_matches(&shape, &record_send(&a), &va);
    }

    #[test]
    fn agree_jsonb((a, b) in jsonb_pair()) {
        let (va, vb) = (OwnedValue::Jsonb(a.clone()), OwnedValue::Jsonb(b.clone()));
        let model = if model_jsonb_eq(&a, &b) { Ordering::Equal } else { Ordering::Less };
        let (ea, eb) = (encode(&va), encode(&vb));
        round_trip(&ea);
        round_trip(&eb);
        prop_assert_eq!(ea == eb, model == Ordering::Equal, "{:?} vs {:?}", a, b);
    }
}
