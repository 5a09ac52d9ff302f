//! Provider adapters at the edge (principle 12): the internal bundle rendered as an OpenAI-style
//! chat request, an OpenAI Responses API request or an Anthropic-style messages request.

use serde_json::{json, Map, Value};

use strata_core::assembly::BundleMessage;
use strata_core::payload::ToolSpec;

/// An OpenAI-style chat completions request body.
pub fn openai(model: &str, messages: &[BundleMessage], tools: &[ToolSpec]) -> Value {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        out.push(match m {
            BundleMessage::System { text } => json!({"role": "system", "content": text}),
            BundleMessage::User { text } => json!({"role": "user", "content": text}),
            // Retrieved content speaks with the user's turn, quoted, never as the system.
            BundleMessage::Data { source, text } => json!({"role": "user",
                "content": BundleMessage::data_envelope(source, text)}),
            BundleMessage::Assistant { text, tool_calls } => {
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                msg.insert(
                    "content".into(),
                    if text.is_empty() && !tool_calls.is_empty() {
                        Value::Null
                    } else {
                        text.clone().into()
                    },
                );
                if !tool_calls.is_empty() {
                    msg.insert(
                        "tool_calls".into(),
                        tool_calls
                            .iter()
                            .map(|c| {
                                json!({"id": c.id, "type": "function",
                                       "function": {"name": c.name, "arguments": c.arguments}})
                            })
                            .collect(),
                    );
                }
                Value::Object(msg)
            }
            BundleMessage::Tool {
                tool_call_id,
                content,
                ..
            } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
        });
    }
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("messages".into(), out.into());
    if !tools.is_empty() {
        body.insert(
            "tools".into(),
            tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.schema}})
                })
                .collect(),
        );
    }
    Value::Object(body)
}

/// An Anthropic-style messages request body: system text apart, strictly alternating roles,
/// tool results as `tool_result` blocks of a user turn.
pub fn anthropic(
    model: &str,
    messages: &[BundleMessage],
    tools: &[ToolSpec],
    max_tokens: u32,
) -> Value {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match turns.last_mut() {
        Some((r, blocks)) if *r == role => blocks.push(block),
        _ => turns.push((role, vec![block])),
    };
    for m in messages {
        match m {
            BundleMessage::System { text } => system.push(text.as_str()),
            BundleMessage::User { text } => push("user", json!({"type": "text", "text": text})),
            // Never folded into `system`: retrieved content is quoted data of the user's turn.
            BundleMessage::Data { source, text } => push(
                "user",
                json!({"type": "text", "text": BundleMessage::data_envelope(source, text)}),
            ),
            BundleMessage::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    push("assistant", json!({"type": "text", "text": text}));
                }
                for c in tool_calls {
                    let input: Value = serde_json::from_str(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    push(
                        "assistant",
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
            }
            BundleMessage::Tool {
                tool_call_id,
                content,
                is_error,
            } => push(
                "user",
                json!({"type": "tool_result", "tool_use_id": tool_call_id,
                       "content": content, "is_error": is_error}),
            ),
        }
    }
    // The Messages API starts with a user turn; a context that begins with the assistant (an
    // older turn's digest after a compaction, say) gets a neutral opening.
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(
            0,
            (
                "user",
                vec![json!({"type": "text", "text": "(earlier context follows)"})],
            ),
        );
    }
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("max_tokens".into(), max_tokens.into());
    if !system.is_empty() {
        body.insert("system".into(), system.join("\n\n").into());
    }
    body.insert(
        "messages".into(),
        turns
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect(),
    );
    if !tools.is_empty() {
        body.insert(
            "tools".into(),
            tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}))
                .collect(),
        );
    }
    Value::Object(body)
}

/// An OpenAI Responses API request body: the system texts as `instructions`, the conversation
/// as `input` items — messages, `function_call` items and their `function_call_output`s paired
/// by `call_id` — and function tools. Reasoning items are never fabricated: Strata keeps none to
/// send back.
pub fn openai_responses(model: &str, messages: &[BundleMessage], tools: &[ToolSpec]) -> Value {
    let mut instructions = Vec::new();
    let mut input = Vec::with_capacity(messages.len());
    let message =
        |role: &str, text: &str| json!({"type": "message", "role": role, "content": text});
    for m in messages {
        match m {
            BundleMessage::System { text } => instructions.push(text.as_str()),
            BundleMessage::User { text } => input.push(message("user", text)),
            // Retrieved content speaks with the user's turn, quoted, never as instructions.
            BundleMessage::Data { source, text } => {
                input.push(message("user", &BundleMessage::data_envelope(source, text)))
            }
            BundleMessage::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    input.push(message("assistant", text));
                }
                for c in tool_calls {
                    input.push(
                        json!({"type": "function_call", "call_id": c.id, "name": c.name,
                        "arguments": c.arguments}),
                    );
                }
            }
            BundleMessage::Tool {
                tool_call_id,
                content,
                ..
            } => input.push(
                json!({"type": "function_call_output", "call_id": tool_call_id, "output": content}),
            ),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    if !instructions.is_empty() {
        body.insert("instructions".into(), instructions.join("\n\n").into());
    }
    body.insert("input".into(), input.into());
    if !tools.is_empty() {
        body.insert(
            "tools".into(),
            tools
                .iter()
                .map(|t| {
                    // Not `strict`: that needs every schema closed, which Strata cannot promise.
                    json!({"type": "function", "name": t.name, "description": t.description,
                        "parameters": t.schema, "strict": false})
                })
                .collect(),
        );
    }
    Value::Object(body)
}
