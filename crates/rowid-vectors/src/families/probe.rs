//! `probe.json`: probe V1 for every candidate prefix length (probe.md §3).

use rowid_codec::probe::PROBE_PREFIX_CANDIDATES;
use rowid_codec::{Domain, OwnedValue, TypeTag};

use super::build::encode_owned;
use crate::{Family, ProbeCase};

pub(super) fn probes() -> Family {
    let text_id = |s: &[u8]| {
        encode_owned(
            Domain::ScanKey,
            &[(TypeTag::Text, Some(OwnedValue::Text(s.to_vec())))],
        )
    };
    let int_id = encode_owned(
        Domain::ScanKey,
        &[(TypeTag::Int8, Some(OwnedValue::Int8(42)))],
    );
    let mut common_a = vec![b'k'; 400];
    common_a.extend_from_slice(b"-a");
    let mut common_b = vec![b'k'; 400];
    common_b.extend_from_slice(b"-b");
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("short int8 identity: always inline", int_id),
        (
            "47-byte text identity (spec/probe.md §5)",
            text_id(b"abcdefghijklmnopqrstuvwxyz0123456789"),
        ),
        ("identity of exactly 64 bytes", text_id(&[b'q'; 55])),
        ("identity of 65 bytes", text_id(&[b'q'; 56])),
        ("long identity, common prefix, tail a", text_id(&common_a)),
        ("long identity, common prefix, tail b", text_id(&common_b)),
    ];
    let mut probes = Vec::new();
    for (comment, identity) in inputs {
        for p in PROBE_PREFIX_CANDIDATES {
            let mode = if identity.len() <= p {
                "inline"
            } else {
                "overflow"
            };
            probes.push(ProbeCase {
                comment: format!("{comment}; P = {p}"),
                identity: identity.clone(),
                prefix_len: p,
                flags: vec![mode],
            });
        }
    }
    Family {
        file: "probe.json",
        spec: "probe.md §2, §3",
        probes,
        ..Family::default()
    }
}
