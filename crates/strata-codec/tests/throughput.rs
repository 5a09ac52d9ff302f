//! Rough throughput check. Only release builds assert the target (decode > 100k small events/s);
//! see the numbers with `cargo test --release -p strata-codec --test throughput -- --nocapture`.

mod common;

use std::time::Instant;

use strata_codec::AvroCodec;

#[test]
fn decode_and_encode_rates() {
    let codec = AvroCodec::new();
    // Small, typical events: prompts, tool calls and results, with a v1 record in the mix.
    let events: Vec<_> = [
        common::FULL[1],
        common::FULL[3],
        common::FULL[4],
        common::FULL[6],
        common::MINIMAL[4],
        common::MINIMAL[1],
    ]
    .iter()
    .map(|text| common::event(text))
    .collect();
    let mut records: Vec<Vec<u8>> = events
        .iter()
        .map(|e| codec.encode(e).expect("encode"))
        .collect();
    records.push(
        codec
            .encode_with_schema_version(&events[4], 1)
            .expect("encode v1"),
    );
    let mean_len = records.iter().map(Vec::len).sum::<usize>() / records.len();

    let n = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let start = Instant::now();
    for i in 0..n {
        let event = codec.decode(&records[i % records.len()]).expect("decode");
        std::hint::black_box(event);
    }
    let decode_rate = n as f64 / start.elapsed().as_secs_f64();

    let mut out = Vec::with_capacity(1024);
    let start = Instant::now();
    for i in 0..n {
        out.clear();
        codec
            .encode_into(&events[i % events.len()], &mut out)
            .expect("encode");
        std::hint::black_box(&out);
    }
    let encode_rate = n as f64 / start.elapsed().as_secs_f64();

    println!(
        "strata-codec: {n} events of {mean_len} bytes on average: decode {decode_rate:.0}/s, encode {encode_rate:.0}/s{}",
        if cfg!(debug_assertions) { " (debug build)" } else { "" }
    );
    if !cfg!(debug_assertions) {
        assert!(decode_rate > 100_000.0, "decode {decode_rate:.0}/s");
    }
}
