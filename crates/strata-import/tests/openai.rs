//! The OpenAI Chat Completions and Responses importers over small invented fixtures of every
//! layout they read.

use serde_json::{json, Value};
use strata_core::{Event, Payload};
use strata_import::{convert, detect, Error, Format, Position, Source};

mod common;
use common::*;

fn call_ids(e: &Event) -> Vec<&str> {
    response(e)
        .tool_calls
        .iter()
        .map(|c| c.tool_call_id.as_str())
        .collect()
}

#[test]
fn chat_array_maps_roles_calls_and_results() {
    let (events, report) = run("openai-chat", "array.json", Format::OpenaiChat);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ToolCallFinished",
            "UserPromptSubmitted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
        ]
    );
    assert!(events.iter().all(|e| e.session_id == "array"));
    // The leading system and developer messages are the system prompt.
    assert_eq!(
        started(&events[0]).system_prompt.as_deref(),
        Some("You are a calendar assistant.\n\nAnswer in one sentence.")
    );
    // One assistant message, two parallel calls, answered out of order by id.
    let first = response(&events[2]);
    assert_eq!(first.text, "Let me look.");
    assert_eq!(call_ids(&events[2]), ["call_a", "call_b"]);
    assert_eq!(first.tool_calls[1].args, json!({"city": "Lyon"}));
    assert_eq!(first.extra["reasoning"], "Two lookups are needed.");
    assert_eq!(result(&events[3]).tool_call_id, "call_b");
    assert_eq!(
        result(&events[4]).output.as_deref(),
        Some("event 42 at 15:00")
    );
    // The legacy function call has no id: its result is paired by position.
    let legacy = &response(&events[5]).tool_calls[0];
    assert_eq!(legacy.name, "move_event");
    assert_eq!(result(&events[6]).tool_call_id, legacy.tool_call_id);
    // A result without its call is kept, and counted.
    assert_eq!(result(&events[7]).tool_call_id, "call_zzz");
    assert_eq!(report.orphan_results, 1);
    assert_eq!(report.calls_without_result, 0);
    assert_eq!(prompt(&events[8]), "Here is the room:");
    // A system message mid-conversation is still part of what the model read.
    assert_eq!(prompt(&events[9]), "Reminder: be brief.");
    match &events[9].payload {
        Payload::UserPromptSubmitted(p) => assert_eq!(p.extra["role"], "system"),
        _ => unreachable!(),
    }
    assert_eq!(report.unmapped["user content part \"image_url\""], 1);
    assert_eq!(report.unmapped["assistant message field \"audio\""], 1);
    // No clock: one second apart from the base time.
    assert_eq!(
        events[1].timestamp - events[0].timestamp,
        chrono::Duration::seconds(1)
    );
}

#[test]
fn chat_document_takes_model_and_tools_from_its_fields() {
    let (events, report) = run("openai-chat", "document.json", Format::OpenaiChat);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
        ]
    );
    // `session_id` names the session; the fields after `messages` still came first.
    assert!(events.iter().all(|e| e.session_id == "files-demo"));
    let start = started(&events[0]);
    assert_eq!(start.model.model, "gpt-4o-2024-08-06");
    assert_eq!(start.model.provider, "openai");
    assert_eq!(start.system_prompt.as_deref(), Some("You help with files."));
    let tools = start.tools.as_ref().expect("tools");
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0].name, "wc");
    assert_eq!(tools[0].description, "Count lines.");
    assert_eq!(tools[0].schema["required"], json!(["path"]));
    assert_eq!(tools[1].name, "patch");
    assert_eq!(start.extra["source_meta"]["temperature"], json!(0.2));
    assert_eq!(report.unmapped["tool type \"web_search\""], 1);
    assert_eq!(report.orphan_results, 0);
}

#[test]
fn chat_jsonl_of_messages_is_one_session_and_reused_ids_still_pair() {
    let (events, report) = run("openai-chat", "messages.jsonl", Format::OpenaiChat);
    assert_eq!(events.len(), 9);
    assert!(events.iter().all(|e| e.session_id == "messages"));
    // The source reuses `calc_1`: the second call and its result get `calc_1#2`.
    assert_eq!(call_ids(&events[2]), ["calc_1"]);
    assert_eq!(result(&events[3]).tool_call_id, "calc_1");
    assert_eq!(call_ids(&events[6]), ["calc_1#2"]);
    assert_eq!(result(&events[7]).tool_call_id, "calc_1#2");
    assert_eq!(report.orphan_results, 0);
    assert_eq!(report.calls_without_result, 0);
}

#[test]
fn chat_jsonl_of_conversations_is_one_session_per_line() {
    let (events, report) = run("openai-chat", "conversations.jsonl", Format::OpenaiChat);
    assert_eq!(
        report.sessions,
        [
            "conversations-conv-a",
            "conversations-2",
            // Line 4 has the same id as line 1: named after its line instead.
            "conversations-4",
        ]
    );
    let first = started(&events[0]);
    assert_eq!(first.model.model, "gpt-4o-mini");
    assert_eq!(first.system_prompt.as_deref(), Some("You define words."));
    assert_eq!(first.tools.as_ref().map(Vec::len), Some(1));
    assert_eq!(report.events["SessionStarted"], 3);
    assert_eq!(report.orphan_results, 0);
}

#[test]
fn tau_bench_results_are_one_session_per_run() {
    let (events, report) = run("openai-chat", "tau-bench.json", Format::OpenaiChat);
    assert_eq!(report.sessions, ["tau-bench-7-0", "tau-bench-7-1"]);
    let start = started(&events[0]);
    assert_eq!(
        start.system_prompt.as_deref(),
        Some("# Shop policy\nBe polite.")
    );
    assert_eq!(start.extra["source_meta"]["reward"], json!(1.0));
    assert_eq!(start.extra["source_meta"]["task_id"], json!(7));
    let call = events
        .iter()
        .find(|e| e.event_type().as_str() == "ModelResponseReceived")
        .expect("a response");
    assert_eq!(response(call).tool_calls[0].name, "get_orders");
    assert_eq!(report.events["ToolCallFinished"], 1);
    assert_eq!(report.orphan_results, 0);
}

#[test]
fn responses_items_group_a_turn_into_one_response() {
    let (events, report) = run("openai-responses", "items.json", Format::OpenaiResponses);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ModelResponseReceived",
        ]
    );
    // reasoning + message + two function calls: one response with both calls.
    let turn = response(&events[2]);
    assert_eq!(turn.message_id, "msg_1");
    assert_eq!(turn.text, "Searching for imports.");
    assert_eq!(call_ids(&events[2]), ["call_grep", "call_ls"]);
    assert_eq!(turn.tool_calls[0].args, json!({"pattern": "import utils"}));
    // Reasoning is kept, never sent: it is not in the text.
    assert_eq!(turn.extra["reasoning"], "Find the importers first.");
    assert_eq!(turn.extra["reasoning_encrypted"], json!(["ZW5jcnlwdGVk"]));
    assert_eq!(
        result(&events[4]).output.as_deref(),
        Some("app.py\nutils.py")
    );
    // A custom tool's free-form input is kept as text.
    let custom = &response(&events[5]).tool_calls[0];
    assert_eq!(custom.name, "apply_patch");
    assert_eq!(
        custom.args["input"],
        "*** Begin Patch\n*** Move: utils.py -> helpers.py\n*** End Patch"
    );
    assert_eq!(result(&events[6]).tool_call_id, "call_patch");
    assert_eq!(result(&events[7]).tool_call_id, "call_nobody");
    assert_eq!(report.orphan_results, 1);
    // A reasoning item after a message starts the next response.
    assert_eq!(
        response(&events[8]).text,
        "Renamed; app.py now imports helpers."
    );
    assert_eq!(
        response(&events[9]).text,
        "I will not delete the repository."
    );
    assert_eq!(report.unmapped["item type \"web_search_call\""], 1);
    assert_eq!(
        report.unmapped["function_call_output content part \"input_image\""],
        1
    );
}

#[test]
fn responses_jsonl_maps_shell_and_mcp_calls() {
    let (events, report) = run("openai-responses", "items.jsonl", Format::OpenaiResponses);
    assert_eq!(
        started(&events[0]).system_prompt.as_deref(),
        Some("You are a shell helper.")
    );
    assert_eq!(prompt(&events[1]), "Show the date.");
    let shell = &response(&events[2]).tool_calls[0];
    assert_eq!(shell.name, "local_shell");
    assert_eq!(shell.args["command"], json!(["date"]));
    assert_eq!(result(&events[3]).tool_call_id, "call_date");
    // Two mcp calls and the message after them: one response, then the calls' own results.
    let turn = response(&events[4]);
    assert_eq!(turn.text, "It is Monday; no events today.");
    assert_eq!(call_ids(&events[4]), ["mcp_1", "mcp_2"]);
    assert_eq!(result(&events[5]).output.as_deref(), Some("no events"));
    assert!(!result(&events[5]).is_error);
    assert!(result(&events[6]).is_error);
    assert_eq!(prompt(&events[7]), "Thanks.");
    assert_eq!(events.len(), 8);
    assert_eq!(report.unmapped["item type \"item_reference\""], 1);
    assert_eq!(report.orphan_results, 0);
    assert_eq!(report.calls_without_result, 0);
}

#[test]
fn responses_document_streams_input_then_output() {
    let (events, report) = run("openai-responses", "response.json", Format::OpenaiResponses);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived"
        ]
    );
    let start = started(&events[0]);
    assert_eq!(start.model.model, "gpt-5-mini");
    assert_eq!(
        start.system_prompt.as_deref(),
        Some("You are a unit converter.")
    );
    assert_eq!(
        start.tools.as_ref().map(|t| t[0].name.as_str()),
        Some("multiply")
    );
    // `input` first (the document has it after `output`).
    assert_eq!(prompt(&events[1]), "How many km are 3 miles?");
    let turn = response(&events[2]);
    assert_eq!(turn.tool_calls[0].name, "multiply");
    let usage = turn.usage.as_ref().expect("the response's usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (120, 30));
    assert_eq!(usage.extra["output_tokens_details"]["reasoning_tokens"], 12);
    assert_eq!(report.calls_without_result, 1);
}

#[test]
fn responses_jsonl_of_conversations_is_one_session_per_line() {
    let (events, report) = run(
        "openai-responses",
        "conversations.jsonl",
        Format::OpenaiResponses,
    );
    assert_eq!(report.sessions, ["conversations-run-1", "conversations-2"]);
    assert_eq!(started(&events[0]).model.model, "gpt-5");
    assert_eq!(report.orphan_results, 0);
    assert_eq!(report.calls_without_result, 0);
    assert_eq!(report.events["ModelResponseReceived"], 3);
}

#[test]
fn ids_are_stable_and_follow_the_record() {
    let path = fixture("openai-chat", "messages.jsonl");
    let (a, _) = run_path(&path, Format::OpenaiChat).expect("converts");
    let (b, _) = run_path(&path, Format::OpenaiChat).expect("converts");
    let ids = |e: &[Event]| e.iter().map(|e| e.event_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    let unique: std::collections::HashSet<_> = ids(&a).into_iter().collect();
    assert_eq!(unique.len(), a.len());

    // Change the answer on line 5: only its event's id changes.
    let dir = tempfile::tempdir().expect("tempdir");
    let changed = dir.path().join("messages.jsonl");
    let text = std::fs::read_to_string(&path).expect("fixture");
    std::fs::write(&changed, text.replace("\"4.\"", "\"four.\"")).expect("write");
    let (c, _) = run_path(&changed, Format::OpenaiChat).expect("converts");
    let differ: Vec<usize> = (0..a.len())
        .filter(|&i| a[i].event_id != c[i].event_id)
        .collect();
    assert_eq!(differ, [4]);
}

#[test]
fn a_changed_item_changes_the_id_of_its_whole_turn() {
    let path = fixture("openai-responses", "items.json");
    let (a, _) = run_path(&path, Format::OpenaiResponses).expect("converts");
    let dir = tempfile::tempdir().expect("tempdir");
    let changed = dir.path().join("items.json");
    let text = std::fs::read_to_string(&path).expect("fixture");
    // The second call of the first turn, not its first item.
    std::fs::write(
        &changed,
        text.replace("\"name\": \"ls\"", "\"name\": \"dir\""),
    )
    .expect("write");
    let (b, _) = run_path(&changed, Format::OpenaiResponses).expect("converts");
    let differ: Vec<usize> = (0..a.len())
        .filter(|&i| a[i].event_id != b[i].event_id)
        .collect();
    assert_eq!(differ, [2]);
}

#[test]
fn session_option_names_every_conversation() {
    let mut o = options();
    o.session = Some("run-9".into());
    let path = fixture("openai-chat", "tau-bench.json");
    let report = convert(&Source::new(&path), Format::OpenaiChat, &o, &mut |_| Ok(())).expect("ok");
    assert_eq!(report.sessions, ["run-9-7-0", "run-9-7-1"]);
}

fn record_error(dir: &str, name: &str, format: Format) -> (Position, String) {
    match run_path(&fixture(dir, name), format) {
        Err(Error::Record {
            position, message, ..
        }) => (position, message),
        other => panic!("expected a record error, got {other:?}"),
    }
}

#[test]
fn malformed_records_are_errors_naming_the_position() {
    let (at, why) = record_error("openai-chat", "bad-line.jsonl", Format::OpenaiChat);
    assert_eq!(at, Position::Line(2));
    assert!(why.contains("neither a message"), "{why}");
    let (at, why) = record_error("openai-chat", "bad-tool.json", Format::OpenaiChat);
    assert_eq!(
        at,
        Position::Element {
            field: None,
            index: 2
        }
    );
    assert!(why.contains("tool_call_id"), "{why}");
    let (at, why) = record_error(
        "openai-responses",
        "bad-call.jsonl",
        Format::OpenaiResponses,
    );
    assert_eq!(at, Position::Line(2));
    assert!(why.contains("call_id"), "{why}");
}

#[test]
fn a_document_without_messages_is_not_chat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("response.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({"id": "chatcmpl-1", "choices": []})).expect("json"),
    )
    .expect("write");
    match run_path(&path, Format::OpenaiChat) {
        Err(Error::File { message, .. }) => assert!(message.contains("messages"), "{message}"),
        other => panic!("expected a file error, got {other:?}"),
    }
}

#[test]
fn detection_tells_responses_lists_that_start_like_chat() {
    // The Agents SDK's input lists start with an easy-input message, as a chat list does.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("items.json");
    let items: Value = json!([
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    ]);
    std::fs::write(&path, items.to_string()).expect("write");
    assert_eq!(
        detect(&Source::new(&path)).expect("detected"),
        Format::OpenaiResponses
    );
}
