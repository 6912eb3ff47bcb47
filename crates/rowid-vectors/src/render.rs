//! JSON rendering of the families (the format of `vectors/*.json`).

use rowid_codec::encode_identity;
use rowid_codec::probe::probe_with_prefix;
use serde_json::{Value as Json, json};

use rowid_testkit::hex::to_hex;

use crate::{Family, families};

/// Renders every family: `(file name, JSON text)`. A case that fails to encode is rendered
/// with `"result": "generation-error"`, which the vector checks reject.
pub fn render_all() -> Vec<(&'static str, String)> {
    families()
        .iter()
        .map(|f| (f.file, render_family(f)))
        .collect()
}

fn family_stem(file: &str) -> &str {
    file.strip_suffix(".json").unwrap_or(file)
}

/// Renders one family as pretty JSON with a trailing newline.
pub fn render_family(f: &Family) -> String {
    let stem = family_stem(f.file);
    let mut vectors = Vec::new();
    let mut n = 0;
    let mut next_id = || {
        n += 1;
        format!("{stem}-{n:03}")
    };
    for case in &f.valid {
        let values: Vec<_> = case
            .fields
            .iter()
            .map(|fl| (fl.tag, fl.value.as_ref().map(|v| v.as_value())))
            .collect();
        let mut bytes = Vec::new();
        let encoded = encode_identity(&mut bytes, case.domain, &values);
        let fields: Vec<Json> = case
            .fields
            .iter()
            .map(|fl| json!({"type": fl.tag.name(), "value": fl.display, "sql": fl.sql}))
            .collect();
        let mut v = json!({
            "id": next_id(),
            "comment": case.comment,
            "domain": case.domain.name(),
            "fields": fields,
            "hex": to_hex(&bytes),
            "result": "valid",
            "flags": case.flags,
        });
        if let Err(e) = encoded {
            // Keeps the failure visible in the file and in the checks instead of aborting.
            v["result"] = json!("generation-error");
            v["error"] = json!(e.to_string());
        }
        vectors.push(v);
    }
    for case in &f.invalid {
        vectors.push(json!({
            "id": next_id(),
            "comment": case.comment,
            "hex": to_hex(&case.bytes),
            "result": "invalid",
            "error": case.error,
            "flags": case.flags,
        }));
    }
    for case in &f.probes {
        let mut probe = Vec::new();
        probe_with_prefix(&case.identity, case.prefix_len, &mut probe);
        vectors.push(json!({
            "id": next_id(),
            "comment": case.comment,
            "identity_hex": to_hex(&case.identity),
            "prefix_len": case.prefix_len,
            "probe_hex": to_hex(&probe),
            "result": "valid",
            "flags": case.flags,
        }));
    }
    let doc = json!({
        "family": stem,
        "spec": format!("spec/{}", f.spec),
        "generated_by": "cargo xtask vectors",
        "setup": f.setup,
        "vectors": vectors,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}
