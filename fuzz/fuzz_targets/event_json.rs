//! Any JSON given to the canonical event parser is an event or field errors, never a panic; an
//! event it accepts reads back from its own JSON, whose compact text is the one of its value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use strata_core::Event;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(event) = Event::from_json(value, Some("fuzz")) {
        let json = event.to_json();
        assert_eq!(event.to_json_string(), json.to_string());
        let again = Event::from_json(json, None).expect("an accepted event reads back");
        assert_eq!(again, event);
    }
});
