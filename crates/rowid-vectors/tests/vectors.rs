//! Checks the committed vector files: they are what the cases render (`vectors --check`), and
//! every vector in them holds when read back from disk, case id printed on failure.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::probe::{max_probe_len, probe_with_prefix};
use rowid_codec::{Domain, TypeTag, decode, validate};
use rowid_testkit::decoders::check_agree;
use rowid_testkit::hex::from_hex;
use rowid_vectors::{check_dir, error_name, vectors_dir};
use serde_json::Value as Json;

fn files() -> Vec<(String, Json)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(vectors_dir()).expect("vectors/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let json: Json =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push((
                path.file_name().unwrap().to_string_lossy().into_owned(),
                json,
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn hex_of(v: &Json, key: &str, id: &str) -> Vec<u8> {
    let s = v[key].as_str().unwrap_or_else(|| panic!("{id}: no {key}"));
    from_hex(s).unwrap_or_else(|| panic!("{id}: bad hex in {key}"))
}

#[test]
fn vector_files_are_fresh() {
    let state = check_dir(&vectors_dir()).unwrap();
    assert!(
        state.is_fresh(),
        "vectors/ is out of date (stale: {:?}, unexpected: {:?}); run `cargo xtask vectors`",
        state.stale,
        state.unexpected
    );
}

#[test]
fn every_vector_holds() {
    let (mut valid, mut invalid, mut probes) = (0, 0, 0);
    for (file, doc) in files() {
        for v in doc["vectors"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: no vectors"))
        {
            let id = v["id"].as_str().unwrap_or("?");
            match (v["result"].as_str(), v.get("probe_hex")) {
                (Some("valid"), Some(_)) => {
                    check_probe(id, v);
                    probes += 1;
                }
                (Some("valid"), None) => {
                    check_valid(id, v);
                    valid += 1;
                }
                (Some("invalid"), _) => {
                    check_invalid(id, v);
                    invalid += 1;
                }
                other => panic!("{id}: unexpected result {other:?}"),
            }
        }
    }
    assert!(
        valid >= 100 && invalid >= 40 && probes >= 24,
        "{valid} valid, {invalid} invalid, {probes} probe vectors"
    );
}

fn check_valid(id: &str, v: &Json) {
    let bytes = hex_of(v, "hex", id);
    let decoded = decode(&bytes).unwrap_or_else(|e| panic!("{id}: does not decode: {e}"));
    let domain = Domain::from_name(v["domain"].as_str().unwrap()).unwrap();
    assert_eq!(decoded.domain, domain, "{id}: domain");
    let fields = v["fields"].as_array().unwrap();
    assert_eq!(decoded.fields.len(), fields.len(), "{id}: field count");
    for (i, (got, want)) in decoded.fields.iter().zip(fields).enumerate() {
        let tag = TypeTag::from_name(want["type"].as_str().unwrap()).unwrap();
        assert_eq!(got.tag, tag, "{id}: field {i} type");
        assert_eq!(
            got.value.is_none(),
            want["value"] == "NULL",
            "{id}: field {i} NULL state"
        );
        assert!(
            want.get("sql").is_some(),
            "{id}: field {i} has no sql member"
        );
    }
    let mut again = Vec::new();
    decoded.encode(&mut again).unwrap();
    assert_eq!(again, bytes, "{id}: re-encoding differs");
    validate(&bytes).unwrap_or_else(|e| panic!("{id}: validate: {e}"));
    check_agree(&bytes).unwrap_or_else(|e| panic!("{id}: {e}"));
}

fn check_invalid(id: &str, v: &Json) {
    let bytes = hex_of(v, "hex", id);
    let want = v["error"].as_str().unwrap();
    let err = decode(&bytes).expect_err(id);
    assert_eq!(error_name(&err), want, "{id}: wrong error {err}");
    let err2 = validate(&bytes).expect_err(id);
    assert_eq!(err, err2, "{id}: decode and validate disagree");
    check_agree(&bytes).unwrap_or_else(|e| panic!("{id}: {e}"));
}

fn check_probe(id: &str, v: &Json) {
    let identity = hex_of(v, "identity_hex", id);
    let want = hex_of(v, "probe_hex", id);
    let p = v["prefix_len"].as_u64().unwrap() as usize;
    let mut got = Vec::new();
    probe_with_prefix(&identity, p, &mut got);
    assert_eq!(got, want, "{id}: probe");
    assert!(got.len() <= max_probe_len(p), "{id}: probe too long");
    if identity.len() <= p {
        assert_eq!(got, identity, "{id}: inline probe must be the identity");
    }
    validate(&identity).unwrap_or_else(|e| panic!("{id}: probe input is not an identity: {e}"));
}
