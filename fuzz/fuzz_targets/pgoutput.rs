//! Fuzzes the pgoutput decoder: no input panics under any protocol options, and a decoded
//! UPDATE's after-image completion never reports a column as both present and missing.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rowid_pgoutput::{Column, Decoder, FlagBits, Message, Options, Relation, complete};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let options = Options {
        proto_version: u32::from(selector % 4) + 1,
        parallel_streaming: selector & 0x80 != 0,
    };
    let mut decoder = Decoder::new(options);
    if let Ok(Message::Update { old, new, .. }) = decoder.decode(Bytes::copy_from_slice(body)) {
        let relation = Relation {
            relid: 0,
            namespace: String::new(),
            name: String::new(),
            replica_identity: b'f',
            columns: Vec::new(),
        };
        let image = complete(&relation, &FlagBits::default(), old.as_ref(), &new);
        for (i, c) in image.columns.iter().enumerate() {
            assert_eq!(*c == Column::UnchangedToast, image.missing.contains(&i));
        }
    }
});
