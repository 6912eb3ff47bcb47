//! Fuzzes the strict decoder and the send-format parsers.
//!
//! Invariants checked on every input:
//! - `decode` and `validate` agree, and an accepted identity re-encodes to the same bytes;
//! - the probe is defined and bounded for any bytes;
//! - every send-format parser either rejects the bytes or yields a value that, once encoded,
//!   decodes and re-encodes to the same identity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rowid_codec::probe::{PROBE_PREFIX_CANDIDATES, max_probe_len, probe_with_prefix};
use rowid_codec::send::value_from_send;
use rowid_codec::{Domain, TypeTag, decode, encode_identity, validate};

fn reencode(id: &rowid_codec::DecodedIdentity) -> Vec<u8> {
    let mut out = Vec::new();
    id.encode(&mut out).expect("decoded identity re-encodes");
    out
}

fuzz_target!(|data: &[u8]| {
    let decoded = decode(data);
    assert_eq!(decoded.is_ok(), validate(data).is_ok());
    if let Ok(id) = &decoded {
        assert_eq!(reencode(id), data, "accepted a non-canonical identity");
    }
    for p in PROBE_PREFIX_CANDIDATES {
        let mut probe = Vec::new();
        probe_with_prefix(data, p, &mut probe);
        assert!(probe.len() <= max_probe_len(p));
    }
    for tag in TypeTag::ALL {
        if let Ok(value) = value_from_send(tag, data) {
            let mut id = Vec::new();
            if encode_identity(&mut id, Domain::ScanKey, &[(tag, Some(value))]).is_ok() {
                let back = decode(&id).expect("encoder output decodes");
                assert_eq!(reencode(&back), id);
            }
        }
    }
});
