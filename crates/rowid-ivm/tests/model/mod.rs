//! What the identity tests share: plans over the tables `x`, `y` (keyed `(k int8, v int8)`)
//! and `z` (keyless `(a int8, b int8)`), and the model encoder: an identity encoded by its
//! rule from a row's values, with `rowid-codec`.

// Each test binary uses some of them.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;

use rowid_codec::scalar::ChildIdentity;
use rowid_codec::{IdentityEncoder, TypeTag, Value};
use rowid_ivm::identity::{Field, Identity};
use rowid_ivm::plan::{Expr, Output, Plan, SourceKey, StoredIdentity};

/// A `bigint` expression.
pub fn e(sql: &str) -> Expr {
    Expr::new(sql, "bigint")
}

/// An output column `name` computed by `sql`.
pub fn out(name: &str, sql: &str) -> Output {
    Output {
        name: name.into(),
        expr: e(sql),
    }
}

/// `alias` over a keyed table `(k int8 PRIMARY KEY, v int8)`.
pub fn keyed(alias: &str) -> Plan {
    Plan::Scan {
        relation: format!("public.{alias}_t"),
        alias: alias.into(),
        columns: vec![
            out("k", &format!("{alias}.k")),
            out("v", &format!("{alias}.v")),
        ],
        key: SourceKey::Key(vec![e(&format!("{alias}.k"))]),
    }
}

/// `alias` over a keyless table `(a int8, b int8)`.
pub fn keyless(alias: &str) -> Plan {
    let columns = vec![
        out("a", &format!("{alias}.a")),
        out("b", &format!("{alias}.b")),
    ];
    Plan::Scan {
        relation: format!("public.{alias}_t"),
        alias: alias.into(),
        key: SourceKey::Keyless(columns.iter().map(|c| c.expr.clone()).collect()),
        columns,
    }
}

/// `alias` over a stream table `(v int8)` whose stored identity has `domain`.
pub fn stored(alias: &str, domain: rowid_codec::Domain, unique: bool) -> Plan {
    Plan::Scan {
        relation: format!("public.{alias}_st"),
        alias: alias.into(),
        columns: vec![out("v", &format!("{alias}.v"))],
        key: SourceKey::Stored(StoredIdentity {
            column: Expr::new(&format!("{alias}.__pgt_row_id"), "bytea"),
            domain,
            unique,
            max_len: Some(40),
        }),
    }
}

/// A `boolean` expression.
pub fn cond(sql: &str) -> Expr {
    Expr::new(sql, "boolean")
}

/// The inner join of `inputs` on `x.v = y.v`.
pub fn join(inputs: Vec<Plan>) -> Plan {
    Plan::inner_join(inputs, Some(cond("x.v = y.v")))
}

/// `input` grouped by `alias.v`, with `count(*)`.
pub fn group_by_v(input: Plan, alias: &str) -> Plan {
    Plan::Aggregate {
        input: Box::new(input),
        group_by: vec![e(&format!("{alias}.v"))],
        columns: vec![out("v", &format!("{alias}.v")), out("n", "count(*)")],
        calls: vec![],
    }
}

/// A row of the model: each expression's value (by its SQL text).
pub type Row = HashMap<String, Option<i64>>;

/// Encodes `id` for `row`, by the rule, with the codec.
pub fn encode(id: &Identity, row: &Row) -> Vec<u8> {
    encode_with(id, row, &|column| {
        panic!("no stored identity in the model row ({column})")
    })
}

/// [`encode`], the stored identity of an upstream stream table read by its column's SQL
/// from `stored`.
pub fn encode_with(id: &Identity, row: &Row, stored: &dyn Fn(&str) -> Vec<u8>) -> Vec<u8> {
    if let [Field::Stored(s)] = id.fields.as_slice() {
        return stored(&s.column.sql);
    }
    let children: Vec<Vec<u8>> = id
        .fields
        .iter()
        .map(|f| match f {
            Field::Child(c) | Field::NullableChild { child: c, .. } => encode_with(c, row, stored),
            Field::Stored(s) => stored(&s.column.sql),
            _ => Vec::new(),
        })
        .collect();
    let mut buf = Vec::new();
    let mut enc =
        IdentityEncoder::begin(&mut buf, id.domain, u32::try_from(id.fields.len()).unwrap())
            .unwrap();
    for (f, child) in id.fields.iter().zip(&children) {
        match f {
            Field::Value(x) => match row.get(&x.sql).copied().flatten() {
                Some(v) => enc.value(&Value::Int8(v)).unwrap(),
                None => enc.null(TypeTag::Int8).unwrap(),
            },
            Field::Child(_) | Field::Stored(_) => enc
                .value(&Value::Identity(ChildIdentity::new(child).unwrap()))
                .unwrap(),
            // The model row holds the side's presence under its expression: absent or NULL,
            // the side is not there.
            Field::NullableChild { present, .. } => {
                match row.get(&present.sql).copied().flatten() {
                    Some(_) => enc
                        .value(&Value::Identity(ChildIdentity::new(child).unwrap()))
                        .unwrap(),
                    None => enc.null(TypeTag::ChildIdentity).unwrap(),
                }
            }
            Field::Branch(n) => enc.value(&Value::Int4(i32::try_from(*n).unwrap())).unwrap(),
            Field::Discriminator(name) => enc.value(&Value::Text(name.as_bytes())).unwrap(),
        }
    }
    enc.finish().unwrap();
    buf
}
