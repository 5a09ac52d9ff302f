//! Any bytes given to the Avro decoder are an event, a sealed event or an error, never a panic,
//! an abort or an unbounded allocation; an event it returns encodes and decodes back to itself,
//! and a sealed one opens (with the seed corpus's key) or fails with an error.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use strata_codec::{AvroCodec, DataKey, Record};

static CODEC: LazyLock<AvroCodec> = LazyLock::new(AvroCodec::new);
/// The key the sealed seeds of `fuzz/corpus/avro_decode` were sealed with.
static KEY: LazyLock<DataKey> = LazyLock::new(|| DataKey::from_parts("dk_fuzz", [7; 32]));

fuzz_target!(|data: &[u8]| {
    match CODEC.decode_record(data) {
        Ok(Record::Plain(event)) => {
            let again = CODEC.encode(&event).expect("a decoded event encodes");
            assert_eq!(CODEC.decode(&again).expect("and decodes"), event);
        }
        Ok(Record::Sealed(sealed)) => {
            if let Ok(event) = CODEC.open(&sealed, &KEY) {
                let again = CODEC.encode_sealed(&event, &KEY).expect("an opened event seals");
                let Ok(Record::Sealed(resealed)) = CODEC.decode_record(&again) else {
                    panic!("a sealed record decodes as sealed")
                };
                assert_eq!(CODEC.open(&resealed, &KEY).expect("and opens"), event);
            }
        }
        Err(_) => {}
    }
});
