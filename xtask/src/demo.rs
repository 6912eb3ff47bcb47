//! `cargo xtask demo`: identities of a few sample rows, computed by the codec.
//!
//! The PostgreSQL extension (`pgtrickle.encode_row_id_v2`) is not part of the workspace yet;
//! until it is, the demo shows what the codec produces for the rows the extension demo will
//! insert, with their probes and strict decoding.

use rowid_codec::probe::probe_v1;
use rowid_codec::{
    Digits, Domain, Numeric, PROBE_V1_PREFIX_LEN, TypeTag, Value, decode, encode_identity,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn show(
    title: &str,
    domain: Domain,
    fields: &[(TypeTag, Option<Value<'_>>)],
) -> Result<(), String> {
    let mut id = Vec::new();
    encode_identity(&mut id, domain, fields).map_err(|e| format!("{title}: {e}"))?;
    let mut probe = Vec::new();
    probe_v1(&id, &mut probe);
    let decoded = decode(&id).map_err(|e| format!("{title}: {e}"))?;
    println!("{title}");
    println!("  identity  ({:>3} bytes) {}", id.len(), hex(&id));
    let kind = if probe == id {
        "inline, = identity"
    } else {
        "overflow: prefix || xxh3-128"
    };
    println!("  probe v1  ({:>3} bytes) {kind}", probe.len());
    let tags: Vec<_> = decoded.fields.iter().map(|f| f.tag.name()).collect();
    println!(
        "  decodes to {} ({})",
        decoded.domain.name(),
        tags.join(", ")
    );
    Ok(())
}

pub fn run() -> Result<(), String> {
    println!("Row Identity V2 codec demo (P = {PROBE_V1_PREFIX_LEN}, provisional)\n");
    show(
        "orders(id int8 PRIMARY KEY), id = 42",
        Domain::ScanKey,
        &[(TypeTag::Int8, Some(Value::Int8(42)))],
    )?;
    let uuid = [
        0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a,
        0x11,
    ];
    show(
        "users(id uuid PRIMARY KEY)",
        Domain::ScanKey,
        &[(TypeTag::Uuid, Some(Value::Uuid(uuid)))],
    )?;
    show(
        "tenants(region text, name text) PRIMARY KEY (region, name) = ('eu', 'acme')",
        Domain::ScanKey,
        &[
            (TypeTag::Text, Some(Value::Text(b"eu"))),
            (TypeTag::Text, Some(Value::Text(b"acme"))),
        ],
    )?;
    let amount = Numeric::finite(false, 0, Digits::native(&[19, 9900]));
    let long_note = vec![b'n'; 200];
    show(
        "keyless log row (amount numeric = 19.99, note text of 200 bytes, ts NULL)",
        Domain::KeylessRow,
        &[
            (TypeTag::Numeric, Some(Value::Numeric(amount))),
            (TypeTag::Text, Some(Value::Text(&long_note))),
            (TypeTag::Timestamptz, None),
        ],
    )?;
    let one = Numeric::finite(false, 0, Digits::native(&[1]));
    let one_00 = Numeric::finite(false, 0, Digits::native(&[1, 0]));
    let mut a = Vec::new();
    let mut b = Vec::new();
    encode_identity(
        &mut a,
        Domain::GroupKey,
        &[(TypeTag::Numeric, Some(Value::Numeric(one)))],
    )
    .map_err(|e| e.to_string())?;
    encode_identity(
        &mut b,
        Domain::GroupKey,
        &[(TypeTag::Numeric, Some(Value::Numeric(one_00)))],
    )
    .map_err(|e| e.to_string())?;
    println!(
        "\nGROUP BY numeric: 1.0 and 1.00 give {} identities",
        if a == b { "the same" } else { "DIFFERENT" }
    );
    println!("\nThe PostgreSQL extension that computes these inside the server is not built yet;");
    println!("this demo runs the codec alone.");
    Ok(())
}
