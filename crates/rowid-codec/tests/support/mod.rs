//! Shared test support: owned inputs, generators, and a model of PostgreSQL's equality and
//! B-tree comparators written independently of the encoder (from the adt/*.c semantics in
//! shared/reference/postgres-semantics.md).
#![allow(dead_code)]

pub mod sql;

use std::cmp::Ordering;

use proptest::prelude::*;
use rowid_codec::value::USECS_PER_DAY;
use rowid_codec::{
    BitString, Digits, Inet, Interval, IpFamily, Numeric, NumericSign, Timetz, TypeTag, Value,
};

/// An owned encoder input, possibly in a non-canonical representation.
#[derive(Clone, Debug)]
pub enum Input {
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Oid(u32),
    Float4(f32),
    Float8(f64),
    Numeric(NumericSign, i16, Vec<u16>),
    Text(Vec<u8>),
    Varchar(Vec<u8>),
    Bpchar(Vec<u8>),
    Bytea(Vec<u8>),
    Uuid([u8; 16]),
    Date(i32),
    Time(i64),
    Timestamp(i64),
    Timestamptz(i64),
    Timetz(i64, i32),
    Interval(i32, i32, i64),
    /// An interval given by its 128-bit comparison value (what the decoder returns).
    IntervalCmp(i128),
    Inet(Inet),
    Cidr(Inet),
    Macaddr([u8; 6]),
    Macaddr8([u8; 8]),
    Bit(u32, Vec<u8>),
    Varbit(u32, Vec<u8>),
    Enum(Vec<u8>),
    Identity(Vec<u8>),
}

impl Input {
    pub fn value(&self) -> Value<'_> {
        match self {
            Input::Bool(v) => Value::Bool(*v),
            Input::Int2(v) => Value::Int2(*v),
            Input::Int4(v) => Value::Int4(*v),
            Input::Int8(v) => Value::Int8(*v),
            Input::Oid(v) => Value::Oid(*v),
            Input::Float4(v) => Value::Float4(*v),
            Input::Float8(v) => Value::Float8(*v),
            Input::Numeric(s, w, d) => Value::Numeric(Numeric {
                sign: *s,
                weight: *w,
                digits: Digits::native(d),
            }),
            Input::Text(v) => Value::Text(v),
            Input::Varchar(v) => Value::Varchar(v),
            Input::Bpchar(v) => Value::Bpchar(v),
            Input::Bytea(v) => Value::Bytea(v),
            Input::Uuid(v) => Value::Uuid(*v),
            Input::Date(v) => Value::Date(*v),
            Input::Time(v) => Value::Time(*v),
            Input::Timestamp(v) => Value::Timestamp(*v),
            Input::Timestamptz(v) => Value::Timestamptz(*v),
            Input::Timetz(t, z) => Value::Timetz(Timetz { time: *t, zone: *z }),
            Input::Interval(m, d, us) => Value::Interval(Interval::from_fields(*m, *d, *us)),
            Input::IntervalCmp(c) => {
                Value::Interval(Interval::from_cmp_value(*c).expect("decoded interval in range"))
            }
            Input::Inet(n) => Value::Inet(*n),
            Input::Cidr(n) => Value::Cidr(*n),
            Input::Macaddr(v) => Value::Macaddr(*v),
            Input::Macaddr8(v) => Value::Macaddr8(*v),
            Input::Bit(l, b) => Value::Bit(BitString {
                bit_len: *l,
                bytes: b,
            }),
            Input::Varbit(l, b) => Value::Varbit(BitString {
                bit_len: *l,
                bytes: b,
            }),
            Input::Enum(v) => Value::Enum(v),
            Input::Identity(v) => Value::Identity(v),
        }
    }

    pub fn tag(&self) -> TypeTag {
        self.value().tag()
    }
}

/// Scalar tags (no child identity, no structural family).
pub fn scalar_tags() -> Vec<TypeTag> {
    TypeTag::ALL.into_iter().filter(|t| t.is_scalar()).collect()
}

/// Tags whose payload order the spec claims matches PostgreSQL's comparator (text types under
/// the C collation, which is what the model compares).
pub fn order_preserving(tag: TypeTag) -> bool {
    tag != TypeTag::Enum
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

fn small_bytes(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(alphabet), 0..=max)
}

fn byte_mix() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(0u8),
        Just(1),
        Just(0x7F),
        Just(0x80),
        Just(0xFF),
        any::<u8>()
    ]
}

fn digit_group() -> impl Strategy<Value = u16> {
    prop_oneof![0u16..3, 9997u16..=9999, 0u16..=9999, Just(255), Just(256)]
}

fn numeric() -> impl Strategy<Value = Input> {
    let finite = (
        any::<bool>(),
        -5i16..=5,
        prop::collection::vec(digit_group(), 0..=6),
    )
        .prop_map(|(neg, w, d)| {
            let s = if neg {
                NumericSign::Negative
            } else {
                NumericSign::Positive
            };
            Input::Numeric(s, w, d)
        });
    let special = prop::sample::select(vec![
        NumericSign::NaN,
        NumericSign::PositiveInfinity,
        NumericSign::NegativeInfinity,
    ])
    .prop_map(|s| Input::Numeric(s, 0, Vec::new()));
    prop_oneof![6 => finite, 1 => special]
}

fn float8() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        any::<u64>().prop_map(f64::from_bits),
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7FF0_0000_0000_0001),
            f64::MIN_POSITIVE,
        ]),
    ]
}

fn float4() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<f32>(),
        any::<u32>().prop_map(f32::from_bits),
        prop::sample::select(vec![
            0.0f32,
            -0.0,
            1.5,
            -1.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0xFFC0_0001),
        ]),
    ]
}

fn inet_value(cidr: bool) -> impl Strategy<Value = Input> {
    let v4 = (prop::array::uniform4(byte_mix()), 0u8..=32).prop_map(|(a, b)| Inet::v4(a, b));
    let v6 = (prop::array::uniform16(byte_mix()), 0u8..=128).prop_map(|(a, b)| Inet::v6(a, b));
    prop_oneof![3 => v4, 1 => v6].prop_map(move |mut n| {
        if cidr {
            let len = n.family.addr_len();
            for (i, byte) in n.addr[..len].iter_mut().enumerate() {
                *byte &= model_mask(n.bits, i);
            }
            Input::Cidr(n)
        } else {
            Input::Inet(n)
        }
    })
}

fn bits_value(varbit: bool) -> impl Strategy<Value = Input> {
    (0u32..=20, prop::collection::vec(byte_mix(), 3)).prop_map(move |(len, mut bytes)| {
        bytes.truncate((len as usize).div_ceil(8));
        if let (true, Some(last)) = (len % 8 != 0, bytes.last_mut()) {
            *last &= 0xFF << (8 - len % 8);
        }
        if varbit {
            Input::Varbit(len, bytes)
        } else {
            Input::Bit(len, bytes)
        }
    })
}

/// Values of one scalar type, edge cases included.
pub fn input(tag: TypeTag) -> BoxedStrategy<Input> {
    let text_alpha: &'static [u8] = b"\x01 ab\xC3\xA9\xFF";
    match tag {
        TypeTag::Bool => any::<bool>().prop_map(Input::Bool).boxed(),
        TypeTag::Int2 => prop_oneof![any::<i16>(), -2i16..=2, Just(i16::MIN), Just(i16::MAX)]
            .prop_map(Input::Int2)
            .boxed(),
        TypeTag::Int4 => prop_oneof![any::<i32>(), -2i32..=2, Just(i32::MIN), Just(i32::MAX)]
            .prop_map(Input::Int4)
            .boxed(),
        TypeTag::Int8 => prop_oneof![any::<i64>(), -2i64..=2, Just(i64::MIN), Just(i64::MAX)]
            .prop_map(Input::Int8)
            .boxed(),
        TypeTag::Oid => prop_oneof![any::<u32>(), 0u32..=2, Just(u32::MAX), Just(0x8000_0000)]
            .prop_map(Input::Oid)
            .boxed(),
        TypeTag::Float4 => float4().prop_map(Input::Float4).boxed(),
        TypeTag::Float8 => float8().prop_map(Input::Float8).boxed(),
        TypeTag::Numeric => numeric().boxed(),
        TypeTag::Text => small_bytes(text_alpha, 5).prop_map(Input::Text).boxed(),
        TypeTag::Varchar => small_bytes(text_alpha, 5).prop_map(Input::Varchar).boxed(),
        TypeTag::Bpchar => small_bytes(b"  ab\x01\xFF", 5)
            .prop_map(Input::Bpchar)
            .boxed(),
        TypeTag::Bytea => small_bytes(b"\x00\x00\x01 a\xFF", 5)
            .prop_map(Input::Bytea)
            .boxed(),
        TypeTag::Uuid => prop::array::uniform16(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()])
            .prop_map(Input::Uuid)
            .boxed(),
        TypeTag::Date => prop_oneof![any::<i32>(), -2i32..=2, Just(i32::MIN), Just(i32::MAX)]
            .prop_map(Input::Date)
            .boxed(),
        TypeTag::Time => prop_oneof![0..=USECS_PER_DAY, Just(0), Just(USECS_PER_DAY)]
            .prop_map(Input::Time)
            .boxed(),
        TypeTag::Timestamp => prop_oneof![any::<i64>(), -2i64..=2, Just(i64::MIN), Just(i64::MAX)]
            .prop_map(Input::Timestamp)
            .boxed(),
        TypeTag::Timestamptz => {
            prop_oneof![any::<i64>(), -2i64..=2, Just(i64::MIN), Just(i64::MAX)]
                .prop_map(Input::Timestamptz)
                .boxed()
        }
        TypeTag::Timetz => {
            let hours = (0i64..=24).prop_map(|h| h * 3_600_000_000);
            let time = prop_oneof![hours, 0..=USECS_PER_DAY];
            let zone = prop_oneof![(-4i32..=4).prop_map(|h| h * 3600), -57_599i32..=57_599];
            (time, zone).prop_map(|(t, z)| Input::Timetz(t, z)).boxed()
        }
        TypeTag::Interval => {
            let small = (
                -2i32..=2,
                -61i32..=61,
                (-2i64..=2).prop_map(|d| d * USECS_PER_DAY),
            );
            let wide = (any::<i32>(), any::<i32>(), any::<i64>());
            let edges = prop::sample::select(vec![
                (i32::MIN, i32::MIN, i64::MIN),
                (i32::MAX, i32::MAX, i64::MAX),
                (0, 0, 0),
            ]);
            prop_oneof![3 => small, 1 => wide, 1 => edges]
                .prop_map(|(m, d, us)| Input::Interval(m, d, us))
                .boxed()
        }
        TypeTag::Inet => inet_value(false).boxed(),
        TypeTag::Cidr => inet_value(true).boxed(),
        TypeTag::Macaddr => prop::array::uniform6(byte_mix())
            .prop_map(Input::Macaddr)
            .boxed(),
        TypeTag::Macaddr8 => prop::array::uniform8(byte_mix())
            .prop_map(Input::Macaddr8)
            .boxed(),
        TypeTag::Bit => bits_value(false).boxed(),
        TypeTag::Varbit => bits_value(true).boxed(),
        TypeTag::Enum => small_bytes(b"ab\x01\xFF", 4).prop_map(Input::Enum).boxed(),
        TypeTag::ChildIdentity => unreachable!("child identities are generated by the caller"),
        _ => unreachable!("structural values are generated in tests/structures.rs"),
    }
}

/// A value equal to `a` under PostgreSQL's equality but (where the type allows) in another
/// representation: extra zero digit groups, `-0`, another NaN, pad spaces, months as days.
pub fn equal_variant(a: &Input) -> BoxedStrategy<Input> {
    match a.clone() {
        Input::Numeric(s, w, d) if matches!(s, NumericSign::Positive | NumericSign::Negative) => {
            (0usize..=2, 0usize..=2)
                .prop_map(move |(lead, trail)| {
                    let mut digits = vec![0u16; lead];
                    digits.extend(&d);
                    digits.extend(std::iter::repeat_n(0, trail));
                    let weight = w + lead as i16;
                    // Zero keeps its class whatever the sign word says.
                    let sign = if d.iter().all(|&g| g == 0) && lead % 2 == 1 {
                        NumericSign::Negative
                    } else {
                        s
                    };
                    Input::Numeric(sign, weight, digits)
                })
                .boxed()
        }
        Input::Float8(x) if x == 0.0 => Just(Input::Float8(-x)).boxed(),
        Input::Float8(x) if x.is_nan() => any::<u64>()
            .prop_map(|p| Input::Float8(f64::from_bits(0x7FF0_0000_0000_0001 | p)))
            .boxed(),
        Input::Float4(x) if x == 0.0 => Just(Input::Float4(-x)).boxed(),
        Input::Float4(x) if x.is_nan() => any::<u32>()
            .prop_map(|p| Input::Float4(f32::from_bits(0x7F80_0001 | p)))
            .boxed(),
        Input::Bpchar(s) => (0usize..=3)
            .prop_map(move |n| {
                let mut v = s.clone();
                v.extend(std::iter::repeat_n(b' ', n));
                Input::Bpchar(v)
            })
            .boxed(),
        Input::Interval(m, d, us) => {
            let mut options = vec![Input::Interval(m, d, us)];
            if let Some(days) = m.checked_mul(30).and_then(|x| x.checked_add(d)) {
                options.push(Input::Interval(0, days, us));
            }
            if let Some(t) = i64::from(d)
                .checked_mul(USECS_PER_DAY)
                .and_then(|x| x.checked_add(us))
            {
                options.push(Input::Interval(m, 0, t));
            }
            prop::sample::select(options).boxed()
        }
        other => Just(other).boxed(),
    }
}

/// A pair of values of `tag`: half independent, half equal-by-construction.
pub fn pair(tag: TypeTag) -> BoxedStrategy<(Input, Input)> {
    let independent = (input(tag), input(tag));
    let equal = input(tag).prop_flat_map(|a| (Just(a.clone()), equal_variant(&a)));
    prop_oneof![independent, equal].boxed()
}

// ---------------------------------------------------------------------------------------
// The model: PostgreSQL's comparators, restated
// ---------------------------------------------------------------------------------------

/// Netmask byte `i` for a prefix of `bits` bits.
pub fn model_mask(bits: u8, i: usize) -> u8 {
    let start = 8 * i as i32;
    let mut m = 0u8;
    for bit in 0..8 {
        if start + bit < i32::from(bits) {
            m |= 0x80 >> bit;
        }
    }
    m
}

/// PostgreSQL's `bitncmp`: compares the first `n` bits of two addresses.
fn bitncmp(a: &[u8], b: &[u8], n: usize) -> Ordering {
    for bit in 0..n {
        let x = (a[bit / 8] >> (7 - bit % 8)) & 1;
        let y = (b[bit / 8] >> (7 - bit % 8)) & 1;
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

/// `network_cmp_internal`.
fn network_cmp(a: &Inet, b: &Inet) -> Ordering {
    if a.family != b.family {
        return (a.family as u8).cmp(&(b.family as u8));
    }
    bitncmp(&a.addr, &b.addr, usize::from(a.bits.min(b.bits)))
        .then(a.bits.cmp(&b.bits))
        .then(bitncmp(&a.addr, &b.addr, usize::from(a.family.max_bits())))
}

/// `float8_cmp_internal`: NaN equals NaN and sorts above everything; `-0 == 0`.
fn float_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// A finite numeric as 33 base-10000 positions, exponents 16 down to -16.
fn dense(weight: i16, digits: &[u16]) -> [u16; 33] {
    let mut out = [0u16; 33];
    for (i, &g) in digits.iter().enumerate() {
        let exp = i32::from(weight) - i as i32;
        out[(16 - exp) as usize] = g;
    }
    out
}

/// `cmp_numerics`.
fn numeric_cmp(a: (NumericSign, i16, &[u16]), b: (NumericSign, i16, &[u16])) -> Ordering {
    // Rank: -inf 0, negative 1, zero 2, positive 3, +inf 4, NaN 5.
    let rank = |(s, w, d): (NumericSign, i16, &[u16])| -> (u8, [u16; 33]) {
        let v = dense(w, d);
        match s {
            NumericSign::NegativeInfinity => (0, [0; 33]),
            NumericSign::PositiveInfinity => (4, [0; 33]),
            NumericSign::NaN => (5, [0; 33]),
            _ if v.iter().all(|&g| g == 0) => (2, v),
            NumericSign::Negative => (1, v),
            NumericSign::Positive => (3, v),
        }
    };
    let (ra, va) = rank(a);
    let (rb, vb) = rank(b);
    ra.cmp(&rb).then_with(|| match ra {
        1 => vb.cmp(&va),
        3 => va.cmp(&vb),
        _ => Ordering::Equal,
    })
}

fn interval_cmp_value(m: i32, d: i32, us: i64) -> i128 {
    i128::from(us) + (i128::from(m) * 30 + i128::from(d)) * 86_400_000_000
}

fn interval_key(v: &Input) -> i128 {
    match v {
        Input::Interval(m, d, us) => interval_cmp_value(*m, *d, *us),
        Input::IntervalCmp(c) => *c,
        _ => unreachable!("not an interval"),
    }
}

fn strip_spaces(s: &[u8]) -> &[u8] {
    let mut end = s.len();
    while end > 0 && s[end - 1] == b' ' {
        end -= 1;
    }
    &s[..end]
}

/// `bit_cmp`: common bytes, then byte length, then bit length.
fn bit_cmp(la: u32, a: &[u8], lb: u32, b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    a[..n]
        .cmp(&b[..n])
        .then(a.len().cmp(&b.len()))
        .then(la.cmp(&lb))
}

/// PostgreSQL's default B-tree comparator for two non-NULL values of one type (text types
/// under the C collation; enum by label, which is only an equality model).
pub fn model_cmp(a: &Input, b: &Input) -> Ordering {
    use Input::*;
    match (a, b) {
        (Bool(x), Bool(y)) => x.cmp(y),
        (Int2(x), Int2(y)) => x.cmp(y),
        (Int4(x), Int4(y)) | (Date(x), Date(y)) => x.cmp(y),
        (Int8(x), Int8(y)) | (Timestamp(x), Timestamp(y)) | (Timestamptz(x), Timestamptz(y)) => {
            x.cmp(y)
        }
        (Time(x), Time(y)) => x.cmp(y),
        (Oid(x), Oid(y)) => x.cmp(y),
        (Float4(x), Float4(y)) => float_cmp(f64::from(*x), f64::from(*y)),
        (Float8(x), Float8(y)) => float_cmp(*x, *y),
        (Numeric(s1, w1, d1), Numeric(s2, w2, d2)) => numeric_cmp((*s1, *w1, d1), (*s2, *w2, d2)),
        (Text(x), Text(y)) | (Varchar(x), Varchar(y)) | (Bytea(x), Bytea(y)) => x.cmp(y),
        (Enum(x), Enum(y)) | (Identity(x), Identity(y)) => x.cmp(y),
        (Bpchar(x), Bpchar(y)) => strip_spaces(x).cmp(strip_spaces(y)),
        (Uuid(x), Uuid(y)) => x.cmp(y),
        (Macaddr(x), Macaddr(y)) => x.cmp(y),
        (Macaddr8(x), Macaddr8(y)) => x.cmp(y),
        (Timetz(t1, z1), Timetz(t2, z2)) => {
            let g1 = t1 + i64::from(*z1) * 1_000_000;
            let g2 = t2 + i64::from(*z2) * 1_000_000;
            g1.cmp(&g2).then(z1.cmp(z2))
        }
        (Interval(..) | IntervalCmp(_), Interval(..) | IntervalCmp(_)) => {
            interval_key(a).cmp(&interval_key(b))
        }
        (Inet(x), Inet(y)) | (Cidr(x), Cidr(y)) => network_cmp(x, y),
        (Bit(l1, x), Bit(l2, y)) | (Varbit(l1, x), Varbit(l2, y)) => bit_cmp(*l1, x, *l2, y),
        _ => panic!("model_cmp across types: {a:?} vs {b:?}"),
    }
}

/// PostgreSQL's equality (`IS NOT DISTINCT FROM` for non-NULL values).
pub fn model_eq(a: &Input, b: &Input) -> bool {
    model_cmp(a, b) == Ordering::Equal
}

/// Keeps IPv4 families honest in generated data.
pub fn family_ok(n: &Inet) -> bool {
    n.family != IpFamily::V4 || n.addr[4..].iter().all(|&b| b == 0)
}

/// The decoder's output as a model input, so the model (not the encoder) judges round trips.
pub fn from_owned(v: &rowid_codec::OwnedValue) -> Input {
    use rowid_codec::OwnedValue as O;
    match v {
        O::Bool(x) => Input::Bool(*x),
        O::Int2(x) => Input::Int2(*x),
        O::Int4(x) => Input::Int4(*x),
        O::Int8(x) => Input::Int8(*x),
        O::Oid(x) => Input::Oid(*x),
        O::Float4(x) => Input::Float4(*x),
        O::Float8(x) => Input::Float8(*x),
        O::Numeric(n) => Input::Numeric(n.sign, n.weight, n.digits.clone()),
        O::Text(x) => Input::Text(x.clone()),
        O::Varchar(x) => Input::Varchar(x.clone()),
        O::Bpchar(x) => Input::Bpchar(x.clone()),
        O::Bytea(x) => Input::Bytea(x.clone()),
        O::Uuid(x) => Input::Uuid(*x),
        O::Date(x) => Input::Date(*x),
        O::Time(x) => Input::Time(*x),
        O::Timestamp(x) => Input::Timestamp(*x),
        O::Timestamptz(x) => Input::Timestamptz(*x),
        O::Timetz(t) => Input::Timetz(t.time, t.zone),
        O::Interval(i) => Input::IntervalCmp(i.cmp_value()),
        O::Inet(n) => Input::Inet(*n),
        O::Cidr(n) => Input::Cidr(*n),
        O::Macaddr(x) => Input::Macaddr(*x),
        O::Macaddr8(x) => Input::Macaddr8(*x),
        O::Bit(b) => Input::Bit(b.bit_len, b.bytes.clone()),
        O::Varbit(b) => Input::Varbit(b.bit_len, b.bytes.clone()),
        O::Enum(x) => Input::Enum(x.clone()),
        O::Identity(c) => Input::Identity(c.bytes.clone()),
        O::Array(_) | O::Range(_) | O::Multirange(_) | O::Jsonb(_) | O::Record(_) => {
            panic!("structural values are modelled in tests/structures.rs")
        }
    }
}

/// True when a decoded value has the canonical shape the spec promises.
pub fn canonical_shape(v: &rowid_codec::OwnedValue) -> bool {
    use rowid_codec::OwnedValue as O;
    match v {
        O::Float4(x) => x.to_bits() != 0x8000_0000 && (!x.is_nan() || x.to_bits() == 0x7FC0_0000),
        O::Float8(x) => {
            x.to_bits() != 1 << 63 && (!x.is_nan() || x.to_bits() == 0x7FF8_0000_0000_0000)
        }
        O::Numeric(n) => {
            let finite = !n.digits.is_empty();
            !finite || (n.digits.first() != Some(&0) && n.digits.last() != Some(&0))
        }
        O::Bpchar(s) => s.last() != Some(&b' '),
        _ => true,
    }
}
