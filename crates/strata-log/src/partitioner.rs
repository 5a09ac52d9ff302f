//! Kafka's default partitioner for keyed records, so that a producer writing to Kafka directly
//! and Strata's own log agree on the partition of every key.

/// Kafka's 32-bit murmur2 hash (`org.apache.kafka.common.utils.Utils.murmur2`, seed
/// `0x9747b28c`), returned as Java's signed `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Java's `int length` wraps the same way for the (unrealistic) >2 GiB key.
    let mut h: u32 = SEED ^ (data.len() as u32);

    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }

    let tail = chunks.remainder();
    // Java's fall-through `switch (length % 4)`.
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }

    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for a keyed record:
/// `toPositive(murmur2(key)) % partitions`.
///
/// # Panics
///
/// If `partitions` is zero.
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "partition count must be positive");
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2` vectors, plus librdkafka's `rdmurmur2.c` unit-test inputs
    /// and one- to five-byte keys (every tail length), all as Java's signed `int`.
    #[test]
    fn murmur2_matches_kafka_vectors() {
        let cases: &[(&[u8], i32)] = &[
            // Kafka UtilsTest.testMurmur2.
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
            // librdkafka rdmurmur2.c `unittest_murmur2` (its `java_murmur2_results`).
            (b"kafka", 0xd067_cf64_u32 as i32),
            (b"giberish123456789", 0x8f55_2b0c_u32 as i32),
            (b"1234", 0x9fc9_7b14_u32 as i32),
            (b"234", 0xe7c0_09ca_u32 as i32),
            (b"34", 0x8739_30da_u32 as i32),
            (b"4", 0x5a4b_5ca1_u32 as i32),
            (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x7842_4f1c),
            (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62_b377),
            (
                b"eAmbleWillBeRemoved,ThePrePartThatIs",
                0xe0e4_e09e_u32 as i32,
            ),
            (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8_b43f),
            (b"", 0x106e_08d9),
            // One- to five-byte keys, from the Java implementation (via akka's Murmur2Spec).
            (b"1", -1_993_445_489),
            (b"12", 126_087_238),
            (b"123", -267_702_483),
            (b"12345", -1_188_365_604),
        ];
        for &(input, expected) in cases {
            assert_eq!(
                murmur2(input),
                expected,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn partition_for_is_kafkas_to_positive_modulo() {
        // toPositive(-790332482) = 1357151166; 1357151166 % 50 = 16.
        assert_eq!(partition_for(b"foobar", 50), 16);
        // toPositive(479470107) = 479470107; % 8 = 3.
        assert_eq!(partition_for(b"abc", 8), 479_470_107 % 8);
        for partitions in 1..=16 {
            for key in [&b"session-1"[..], b"", b"x", b"a-little-bit-long-string"] {
                let p = partition_for(key, partitions);
                assert!(p < partitions);
                assert_eq!(p, partition_for(key, partitions));
            }
        }
    }
}
