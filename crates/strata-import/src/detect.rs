//! Which format a file is in, from its content (`--format auto`).
//!
//! JSONL files are told apart by their first lines' keys; JSON documents by their top-level
//! keys (read with [`crate::read::outline`], without holding the document) or, for an array,
//! its first element.

use std::fs::File;
use std::io::{BufRead, BufReader};

use serde_json::{Map, Value};
use strata_core::EventType;

use crate::read::{outline, Outline};
use crate::{Error, Format, Result, Source};

/// Lines looked at before giving up on a JSONL file.
const LINES: usize = 50;

/// The format of `source`.
pub fn detect(source: &Source) -> Result<Format> {
    let io = |e| Error::Io {
        file: source.name.clone(),
        source: e,
    };
    let unknown = |why: &str| Error::File {
        file: source.name.clone(),
        message: format!(
            "cannot tell its format ({why}); name it with --format ({})",
            Format::ALL.map(Format::as_str).join(", ")
        ),
    };
    let mut reader = BufReader::new(File::open(&source.path).map_err(io)?);
    let mut line = Vec::new();
    let mut objects: Vec<Map<String, Value>> = Vec::new();
    let mut first = true;
    while objects.len() < LINES {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_start_matches('\u{feff}').trim();
        if text.is_empty() {
            continue;
        }
        if first && !text.starts_with('{') {
            // A JSON array, or not JSON at all.
            break;
        }
        first = false;
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(o)) => objects.push(o),
            // The first line is not a whole object: a pretty-printed document.
            _ if objects.is_empty() => break,
            // A later line is broken: leave it to the importer to say where.
            _ => break,
        }
    }
    if !objects.is_empty() {
        if let Some(f) = jsonl_format(&objects) {
            return Ok(f);
        }
        // One line holding a whole document (`{"messages": [...]}` minified).
        if objects.len() == 1 {
            if let Some(f) = object_format(&outline_of(&objects[0])) {
                return Ok(f);
            }
        }
        return Err(unknown("its lines are JSON objects of no known shape"));
    }
    let file = File::open(&source.path).map_err(io)?;
    let outline = outline(file).map_err(|e| Error::File {
        file: source.name.clone(),
        message: format!("not JSONL, and not a valid JSON document: {e}"),
    })?;
    if outline.is_array {
        let elements: Vec<&Map<String, Value>> =
            outline.head.iter().filter_map(Value::as_object).collect();
        if elements.is_empty() {
            return Err(unknown("an empty JSON array, or not of objects"));
        }
        return match list_format(&elements) {
            // mini-swe-agent before its `info` wrapper wrote a bare list of chat messages: only
            // the file name tells it from any other.
            Some(Format::OpenaiChat) if is_traj_json(source) => Ok(Format::MiniSweAgent),
            Some(f) => Ok(f),
            None => Err(unknown(
                "a JSON array whose first element is neither a message nor an item",
            )),
        };
    }
    object_format(&outline).ok_or_else(|| unknown("a JSON object of no known shape"))
}

fn is_traj_json(source: &Source) -> bool {
    source
        .path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(".traj.json"))
}

fn outline_of(o: &Map<String, Value>) -> Outline {
    Outline {
        keys: o
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map(str::to_owned)))
            .collect(),
        first_of: o
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_array()?.first()?.clone())))
            .collect(),
        ..Outline::default()
    }
}

fn str_of<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

/// The format of a JSONL file from its first lines.
fn jsonl_format(lines: &[Map<String, Value>]) -> Option<Format> {
    let first = &lines[0];
    let canonical = |o: &Map<String, Value>| {
        o.contains_key("event_id")
            && o.contains_key("session_id")
            && str_of(o, "type").and_then(EventType::parse).is_some()
    };
    if canonical(first) {
        return Some(Format::Canonical);
    }
    const CODEX_TYPES: [&str; 5] = [
        "session_meta",
        "response_item",
        "turn_context",
        "event_msg",
        "compacted",
    ];
    let codex = |o: &Map<String, Value>| {
        o.contains_key("payload") && str_of(o, "type").is_some_and(|t| CODEX_TYPES.contains(&t))
    };
    // Codex before 0.3x: a first line of session metadata, then bare items.
    let legacy_codex = first.contains_key("id")
        && first.contains_key("timestamp")
        && (first.contains_key("instructions") || first.contains_key("git"))
        && !first.contains_key("type");
    if codex(first) || legacy_codex {
        return Some(Format::Codex);
    }
    const CLAUDE_TYPES: [&str; 6] = [
        "user",
        "assistant",
        "summary",
        "system",
        "file-history-snapshot",
        "queue-operation",
    ];
    let claude = |o: &Map<String, Value>| {
        o.contains_key("sessionId")
            || o.contains_key("parentUuid")
            || o.contains_key("leafUuid")
            || (str_of(o, "type").is_some_and(|t| CLAUDE_TYPES.contains(&t))
                && !o.contains_key("payload")
                && !o.contains_key("role"))
    };
    if lines.iter().take(LINES).any(claude) && !lines.iter().any(codex) {
        return Some(Format::ClaudeCode);
    }
    if first.contains_key("messages") && !first.contains_key("info") {
        return Some(Format::OpenaiChat);
    }
    if first.contains_key("input") && first.get("input").is_some_and(Value::is_array) {
        return Some(Format::OpenaiResponses);
    }
    let lines: Vec<&Map<String, Value>> = lines.iter().collect();
    list_format(&lines)
}

/// The format of a list of messages or items (or of conversations) from its first elements: a
/// Responses item anywhere among them makes it Responses — the Agents SDK's lists often start
/// with an easy-input message (`{"role": "user", "content": "..."}`) that a chat message looks
/// exactly like.
fn list_format(elements: &[&Map<String, Value>]) -> Option<Format> {
    let first = elements.first()?;
    if elements.iter().any(|o| is_responses_item(o)) {
        return Some(Format::OpenaiResponses);
    }
    message_format(first)
}

/// Whether an object can only be a Responses item: an item `type`, content parts of the
/// Responses kinds (`input_text`...), or a conversation of items (`input` / `output` arrays).
fn is_responses_item(o: &Map<String, Value>) -> bool {
    if message_format(o) == Some(Format::OpenaiResponses) {
        return true;
    }
    let responses_part = |p: &Value| {
        p.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.starts_with("input_") || t.starts_with("output_"))
    };
    let has_parts = o
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|parts| parts.iter().any(responses_part));
    let conversation = !o.contains_key("messages")
        && ["input", "output"]
            .iter()
            .any(|k| o.get(*k).is_some_and(Value::is_array));
    has_parts || conversation
}

/// Whether an object is a chat message (`role`) or a Responses item (`type`).
fn message_format(o: &Map<String, Value>) -> Option<Format> {
    const ITEM_TYPES: [&str; 14] = [
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "custom_tool_call",
        "custom_tool_call_output",
        "computer_call",
        "computer_call_output",
        "web_search_call",
        "file_search_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_call",
        "item_reference",
    ];
    if str_of(o, "type").is_some_and(|t| ITEM_TYPES.contains(&t)) {
        return Some(Format::OpenaiResponses);
    }
    if o.contains_key("role") && (o.contains_key("content") || o.contains_key("tool_calls")) {
        return Some(Format::OpenaiChat);
    }
    // A conversation: `messages`, or tau-bench's `traj` (its results are lists of them).
    if o.contains_key("messages") || o.get("traj").is_some_and(Value::is_array) {
        return Some(Format::OpenaiChat);
    }
    None
}

/// The format of a JSON document that is an object.
fn object_format(outline: &Outline) -> Option<Format> {
    let has = |k: &str| outline.keys.iter().any(|(key, _)| key == k);
    let value = |k: &str| {
        outline
            .keys
            .iter()
            .find(|(key, _)| key == k)
            .and_then(|(_, v)| v.as_deref())
    };
    if value("trajectory_format").is_some_and(|f| f.starts_with("mini-swe-agent")) {
        return Some(Format::MiniSweAgent);
    }
    if has("trajectory") || has("history") {
        return Some(Format::SweAgent);
    }
    if has("messages") {
        return Some(if has("info") {
            Format::MiniSweAgent
        } else {
            Format::OpenaiChat
        });
    }
    if has("input") || has("items") || has("output") {
        return Some(Format::OpenaiResponses);
    }
    None
}
