//! The schema fingerprints against an independent implementation: fastavro (PyPI), as producers
//! outside Rust compute them. `scripts/services.sh start` installs it and names its interpreter
//! in `STRATA_TEST_PYTHON`; without it the test is skipped with a message, except under `CI`,
//! where a missing interpreter is a failure.

use std::process::Command;

use strata_codec::{AvroCodec, SCHEMA_CURRENT, SCHEMA_V1, SCHEMA_V2, SCHEMA_V3};

const FINGERPRINT: &str = r#"
import json, sys
from fastavro.schema import parse_schema, to_parsing_canonical_form, fingerprint
schema = parse_schema(json.loads(sys.stdin.read()))
print(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
"#;

#[test]
fn every_schema_version_has_the_fingerprint_fastavro_computes() {
    let Ok(python) = std::env::var("STRATA_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "STRATA_TEST_PYTHON is not set: run scripts/services.sh start"
        );
        eprintln!("skipped: STRATA_TEST_PYTHON is not set (scripts/services.sh start sets it)");
        return;
    };
    let codec = AvroCodec::new();
    for (version, text) in [
        (1, SCHEMA_V1),
        (2, SCHEMA_V2),
        (3, SCHEMA_V3),
        (4, SCHEMA_CURRENT),
    ] {
        let mut child = Command::new(&python)
            .args(["-c", FINGERPRINT])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write schema");
        let out = child.wait_with_output().expect("fastavro");
        assert!(
            out.status.success(),
            "fastavro failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let ours: String = codec
            .fingerprint_of(version)
            .expect("known version")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours, theirs, "schema version {version}");
    }
}
