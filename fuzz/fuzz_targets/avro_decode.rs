//! Any bytes given to the Avro decoder are an event or an error, never a panic, an abort or an
//! unbounded allocation; an event it returns encodes and decodes back to itself.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use strata_codec::AvroCodec;

static CODEC: LazyLock<AvroCodec> = LazyLock::new(AvroCodec::new);

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = CODEC.decode(data) {
        let again = CODEC.encode(&event).expect("a decoded event encodes");
        assert_eq!(CODEC.decode(&again).expect("and decodes"), event);
    }
});
