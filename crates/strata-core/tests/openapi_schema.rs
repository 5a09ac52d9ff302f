//! The event schemas of `docs/openapi.yaml` are generated from the Rust payload types
//! ([`EventType::payload_schema`]): this test writes them (with `STRATA_WRITE_OPENAPI=1`) and
//! fails when the checked-in document disagrees with them, or when they and
//! `schemas/event.avsc` name different fields.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{json, Map, Value};
use strata_core::EventType;

const BEGIN: &str = "    # BEGIN GENERATED event schemas: from the Rust payload types; \
STRATA_WRITE_OPENAPI=1 cargo test -p strata-core --test openapi_schema rewrites them\n";
const END: &str = "    # END GENERATED event schemas\n";

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn component(name: &str) -> String {
    format!("#/components/schemas/{name}")
}

/// `value` with its `$defs` references pointed at the components.
fn with_component_refs(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        let name = r.strip_prefix("#/$defs/").unwrap_or(&r).to_owned();
                        (k, Value::String(component(&name)))
                    }
                    (_, v) => (k, with_component_refs(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(with_component_refs).collect()),
        v => v,
    }
}

/// Every generated component, by name, in a stable order: the union `Event`, then per type its
/// event and payload, then the types the payloads share.
fn components() -> Vec<(String, Value)> {
    let mut shared: Map<String, Value> = Map::new();
    let mut per_type = Vec::new();
    let mut mapping = Map::new();
    for ty in EventType::ALL {
        let name = ty.as_str();
        let mut schema = with_component_refs(ty.payload_schema().to_value());
        let obj = schema
            .as_object_mut()
            .expect("a payload schema is an object");
        obj.shift_remove("$schema");
        obj.shift_remove("title");
        for (def, body) in obj
            .shift_remove("$defs")
            .and_then(|d| d.as_object().cloned())
            .unwrap_or_default()
        {
            if let Some(seen) = shared.get(&def) {
                assert_eq!(seen, &body, "{def} is two different types");
            }
            shared.insert(def, body);
        }
        // An absent payload is `{}`: required when that is not a valid one.
        let needs_payload = obj.get("required").is_some_and(|r| r != &json!([]));
        let required = if needs_payload {
            json!(["type", "payload"])
        } else {
            json!(["type"])
        };
        let mut description = format!("An event of type {name}.");
        if ty.is_derived() {
            description.push_str(" Written by Strata's services only (403 with a tenant key).");
        }
        let event = json!({
            "description": description,
            "allOf": [
                {"$ref": component("EventEnvelope")},
                {"type": "object", "required": required, "properties": {
                    "type": {"const": name},
                    "payload": {"$ref": component(&format!("{name}Payload"))}
                }}
            ]
        });
        mapping.insert(name.to_owned(), component(&format!("{name}Event")).into());
        per_type.push((format!("{name}Event"), event));
        per_type.push((format!("{name}Payload"), schema));
    }
    let one_of: Vec<Value> = mapping.values().map(|r| json!({"$ref": r})).collect();
    let union = json!({
        "description": "The canonical event, JSON contract v1: the envelope, and the \
            payload of its type. Unknown fields are kept, at the top level and in payloads.",
        "oneOf": one_of,
        "discriminator": {"propertyName": "type", "mapping": mapping},
    });
    let mut out = vec![("Event".to_owned(), union)];
    out.extend(per_type);
    out.extend(shared);
    out
}

/// The generated block of the document: one component a line, JSON being YAML.
fn generated() -> String {
    let mut text = String::from(BEGIN);
    for (name, schema) in components() {
        text.push_str(&format!("    {name}: {schema}\n"));
    }
    text.push_str(END);
    text
}

#[test]
fn the_openapi_document_has_the_generated_event_schemas() {
    let path = repo_file("docs/openapi.yaml");
    let doc = std::fs::read_to_string(&path).expect("docs/openapi.yaml");
    let start = doc
        .find(BEGIN)
        .expect("the BEGIN GENERATED line in docs/openapi.yaml");
    let end = doc
        .find(END)
        .expect("the END GENERATED line in docs/openapi.yaml")
        + END.len();
    let want = generated();
    if std::env::var_os("STRATA_WRITE_OPENAPI").is_some() {
        let written = format!("{}{want}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, written).expect("write docs/openapi.yaml");
        return;
    }
    assert!(
        doc[start..end] == want,
        "docs/openapi.yaml's event schemas differ from the Rust types: run \
         STRATA_WRITE_OPENAPI=1 cargo test -p strata-core --test openapi_schema"
    );
}

/// The fields of each payload record of `schemas/event.avsc`, by type (`extra` left out: it
/// carries the unknown fields).
fn avro_payload_fields() -> Vec<(String, BTreeSet<String>)> {
    let text = std::fs::read_to_string(repo_file("schemas/event.avsc")).expect("event.avsc");
    let schema: Value = serde_json::from_str(&text).expect("event.avsc is JSON");
    let payload = schema["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .find(|f| f["name"] == "payload")
        .expect("a payload field");
    payload["type"]
        .as_array()
        .expect("a union of payload records")
        .iter()
        .map(|record| {
            let fields = record["fields"].as_array().expect("record fields");
            let names = fields
                .iter()
                .filter_map(|f| f["name"].as_str())
                .filter(|n| *n != "extra")
                .map(str::to_owned)
                .collect();
            (record["name"].as_str().expect("a name").to_owned(), names)
        })
        .collect()
}

#[test]
fn the_schemas_and_the_avro_schema_name_the_same_fields() {
    let avro = avro_payload_fields();
    for ty in EventType::ALL {
        let schema = ty.payload_schema().to_value();
        let json: BTreeSet<String> = schema["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let (_, fields) = avro
            .iter()
            .find(|(name, _)| name == ty.as_str())
            .unwrap_or_else(|| panic!("{} has no record in schemas/event.avsc", ty.as_str()));
        assert_eq!(&json, fields, "{}: JSON Schema vs event.avsc", ty.as_str());
    }
}

#[test]
fn a_session_started_schema_requires_what_the_server_requires() {
    let schema = EventType::SessionStarted.payload_schema().to_value();
    assert_eq!(
        schema["required"],
        json!(["model", "context_window_tokens", "reserved_output_tokens"])
    );
    let (_, event) = components()
        .into_iter()
        .find(|(name, _)| name == "SessionStartedEvent")
        .expect("generated");
    assert_eq!(event["allOf"][1]["required"], json!(["type", "payload"]));
}
