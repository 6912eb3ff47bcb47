//! The codec's three decoders judged against each other on any bytes: the owning
//! [`decode`], [`validate`], and the borrowing [`fields`] iterator.

use rowid_codec::decode::fields;
use rowid_codec::tag::{NULL_STATE, TUPLE_END, VALUE_STATE, VERSION_V2};
use rowid_codec::{Domain, OwnedValue, TypeTag, decode, encode_identity, validate};

/// Checks that the three decoders accept and reject `bytes` alike, with the same error, and
/// that on an accepted identity the iterator's fields are the decoded ones: same tags, each
/// payload decodes to the decoded value, and the header, tags, states and payloads put back
/// together are `bytes` exactly. Returns what disagreed.
pub fn check_agree(bytes: &[u8]) -> Result<(), String> {
    let decoded = decode(bytes);
    let validated = validate(bytes);
    let borrowed = fields(bytes).and_then(|it| {
        let domain = it.domain();
        let count = it.field_count();
        let mut refs = Vec::new();
        let mut it = it;
        for f in it.by_ref() {
            refs.push(f?);
        }
        let summary = it.finish()?;
        Ok((domain, count, refs, summary))
    });
    match (&decoded, &validated, &borrowed) {
        (Err(a), Err(b), Err(c)) if a == b && b == c => Ok(()),
        (Ok(id), Ok(summary), Ok((domain, count, refs, borrowed_summary))) => {
            if summary != borrowed_summary {
                return Err(format!(
                    "summaries differ: {summary:?} vs {borrowed_summary:?}"
                ));
            }
            if *domain != id.domain
                || *count as usize != refs.len()
                || refs.len() != id.fields.len()
            {
                return Err("domain or field count differs".into());
            }
            let mut rebuilt = vec![VERSION_V2, *domain as u8];
            rebuilt.extend_from_slice(&count.to_be_bytes());
            for (r, f) in refs.iter().zip(&id.fields) {
                if r.tag != f.tag {
                    return Err(format!("field {}: tag {:?} vs {:?}", r.index, r.tag, f.tag));
                }
                let value = r
                    .to_owned_value()
                    .map_err(|e| format!("field {}: {e}", r.index))?;
                // Compared through their encodings: a float NaN is not equal to itself.
                if one_field(r.tag, value.as_ref()) != one_field(f.tag, f.value.as_ref()) {
                    return Err(format!(
                        "field {}: borrowed payload decodes differently",
                        r.index
                    ));
                }
                rebuilt.push(r.tag as u8);
                match r.payload {
                    None => rebuilt.push(NULL_STATE),
                    Some(p) => {
                        rebuilt.push(VALUE_STATE);
                        rebuilt.extend_from_slice(p);
                    }
                }
            }
            rebuilt.push(TUPLE_END);
            if rebuilt != bytes {
                return Err("the borrowed fields do not rebuild the identity".into());
            }
            Ok(())
        }
        _ => Err(format!(
            "decoders disagree: decode {:?}, validate {:?}, fields {:?}",
            decoded.as_ref().err(),
            validated.as_ref().err(),
            borrowed.as_ref().err()
        )),
    }
}

/// A one-field identity of `value`, or the encoder's error text.
fn one_field(tag: TypeTag, value: Option<&OwnedValue>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode_identity(
        &mut out,
        Domain::ScanKey,
        &[(tag, value.map(OwnedValue::as_value))],
    )
    .map_err(|e| e.to_string())?;
    Ok(out)
}
