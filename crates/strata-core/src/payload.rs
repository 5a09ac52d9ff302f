//! Payloads of the v1 event types. Unknown payload fields are kept in `extra`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::{parse_at, FieldError};

macro_rules! event_types {
    ($( $(#[$doc:meta])* $name:ident($ty:ty) $(derived = $derived:literal)? ),+ $(,)?) => {
        /// The `type` of an event.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum EventType {
            $( $(#[$doc])* $name, )+
        }

        impl EventType {
            /// Every v1 type, in declaration order.
            pub const ALL: &'static [EventType] = &[$(EventType::$name),+];

            pub fn as_str(self) -> &'static str {
                match self { $(EventType::$name => stringify!($name)),+ }
            }

            pub fn parse(s: &str) -> Option<EventType> {
                match s { $(stringify!($name) => Some(EventType::$name),)+ _ => None }
            }

            /// Written by a service from other events, not by an agent platform.
            pub fn is_derived(self) -> bool {
                match self { $(EventType::$name => false $(|| $derived)?),+ }
            }

            /// The JSON Schema of this type's payload, from its Rust type (draft 2020-12, its
            /// nested types under `$defs`): what `docs/openapi.yaml` describes (see
            /// `crates/strata-core/tests/openapi_schema.rs`).
            pub fn payload_schema(self) -> schemars::Schema {
                match self { $(EventType::$name => schemars::schema_for!($ty)),+ }
            }
        }

        /// The typed payload of an event; its variant is the event's `type`.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum Payload {
            $( $(#[$doc])* $name($ty), )+
        }

        impl Payload {
            pub fn event_type(&self) -> EventType {
                match self { $(Payload::$name(_) => EventType::$name),+ }
            }

            pub fn from_json(ty: EventType, value: Value) -> Result<Payload, FieldError> {
                match ty { $(EventType::$name => parse_at::<$ty>(value, "payload").map(Payload::$name)),+ }
            }

            pub fn to_json(&self) -> Value {
                match self {
                    $(Payload::$name(p) => serde_json::to_value(p).expect("payload serializes")),+
                }
            }

            /// Serializes the payload's fields as [`Payload::to_json`] has them, without going
            /// through a [`Value`] (see [`crate::json`] for the one case where they differ).
            pub(crate) fn serialize_fields<S: serde::Serializer>(
                &self,
                s: S,
            ) -> Result<S::Ok, S::Error> {
                match self {
                    $(Payload::$name(p) => p.serialize(s)),+
                }
            }

            /// The compact text of [`Payload::to_json`], byte for byte, written without building
            /// the [`Value`].
            pub fn to_json_string(&self) -> String {
                crate::json::to_string(&Fields(self), 128)
                    .unwrap_or_else(|| self.to_json().to_string())
            }
        }
    };
}

event_types! {
    /// A session begins: model, window, system prompt and tools.
    SessionStarted(SessionStarted),
    /// The user asks for something.
    UserPromptSubmitted(UserPromptSubmitted),
    /// The model answered, possibly requesting tool calls.
    ModelResponseReceived(ModelResponseReceived),
    /// A tool call was requested.
    ToolCallRequested(ToolCallRequested),
    /// A tool call returned (successfully or with `is_error`).
    ToolCallFinished(ToolCallFinished),
    /// A tool call could not run or crashed.
    ToolCallFailed(ToolCallFailed),
    /// The agent read a file.
    FileRead(FileRead),
    /// The agent wrote a file.
    FileWritten(FileWritten),
    /// The agent applied a diff.
    DiffApplied(DiffApplied),
    /// The agent stated its task state explicitly.
    StateUpdated(StateUpdated),
    /// A new branch starts at an event of an existing one.
    BranchForked(BranchForked),
    /// A child session was started for a subagent.
    SubagentStarted(SubagentStarted),
    /// A child session finished and reported.
    SubagentFinished(SubagentFinished),
    /// A child session's results were promoted to its parent.
    SubagentPromoted(SubagentPromoted),
    /// A human approval was asked for.
    ApprovalRequested(ApprovalRequested),
    /// A human approval was granted.
    ApprovalGranted(ApprovalDecision),
    /// A human approval was denied.
    ApprovalDenied(ApprovalDecision),
    /// A verifier (tests, linter, reviewer) reached a verdict.
    VerifierFinished(VerifierFinished),
    /// An item of a provider's conversation format that Strata does not model, kept whole.
    ProviderItemRecorded(ProviderItemRecorded),
    /// A governed memory was recorded (derived).
    MemoryRecorded(MemoryRecorded) derived = true,
    /// A memory was replaced by another (derived).
    MemorySuperseded(MemorySuperseded) derived = true,
    /// A compaction record was written (derived).
    CompactionCompleted(CompactionCompleted) derived = true,
    /// A context bundle was assembled (derived).
    ContextBuilt(ContextBuilt) derived = true,
}

/// The tool arguments of a payload that did not parse, checked as [`Payload::check_input`]
/// checks a parsed one's, so that every problem of a bad event is reported at once.
pub(crate) fn raw_args_problems(ty: EventType, payload: &Value) -> Vec<FieldError> {
    let check = |field: String, args: Option<&Value>| {
        let args = args.cloned().unwrap_or(Value::Null);
        tool_args::normalize(args)
            .err()
            .map(|e| FieldError::new(field, e))
    };
    match ty {
        EventType::ModelResponseReceived => payload
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, c)| check(format!("payload.tool_calls[{i}].args"), c.get("args")))
            .collect(),
        EventType::ToolCallRequested => check("payload.args".into(), payload.get("args"))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

impl Payload {
    /// Checks what new input must satisfy beyond what a stored event did: tool arguments are a
    /// JSON object (or its text) or nothing ([`tool_args`]).
    pub(crate) fn check_input(&self, errors: &mut Vec<FieldError>) {
        let mut check = |field: String, args: &Value| {
            if let Err(e) = tool_args::normalize(args.clone()) {
                errors.push(FieldError::new(field, e));
            }
        };
        match self {
            Payload::ModelResponseReceived(p) => {
                for (i, c) in p.tool_calls.iter().enumerate() {
                    check(format!("payload.tool_calls[{i}].args"), &c.args);
                }
            }
            Payload::ToolCallRequested(p) => check("payload.args".into(), &p.args),
            _ => {}
        }
    }

    /// Checks constraints serde cannot express; pushes problems onto `errors`.
    pub(crate) fn validate(&self, errors: &mut Vec<FieldError>) {
        fn non_empty(errors: &mut Vec<FieldError>, field: &str, value: &str) {
            if value.trim().is_empty() {
                errors.push(FieldError::new(
                    format!("payload.{field}"),
                    "must not be empty",
                ));
            }
        }
        match self {
            Payload::UserPromptSubmitted(p) => non_empty(errors, "message_id", &p.message_id),
            Payload::ModelResponseReceived(p) => {
                non_empty(errors, "message_id", &p.message_id);
                if let Some(e) = p.assembly_id_error() {
                    errors.push(FieldError::new("payload.assembly_id", e));
                }
                for (i, c) in p.tool_calls.iter().enumerate() {
                    non_empty(
                        errors,
                        &format!("tool_calls[{i}].tool_call_id"),
                        &c.tool_call_id,
                    );
                    non_empty(errors, &format!("tool_calls[{i}].name"), &c.name);
                }
            }
            Payload::ToolCallRequested(p) => {
                non_empty(errors, "tool_call_id", &p.tool_call_id);
                non_empty(errors, "name", &p.name);
            }
            Payload::ToolCallFinished(p) => {
                non_empty(errors, "tool_call_id", &p.tool_call_id);
                if p.output.is_none() && p.output_ref.is_none() {
                    errors.push(FieldError::new(
                        "payload.output",
                        "one of output or output_ref is required",
                    ));
                }
                if p.output_ref.is_some() && (p.output_sha256.is_none() || p.output_bytes.is_none())
                {
                    errors.push(FieldError::new(
                        "payload.output_ref",
                        "output_ref needs output_sha256 and output_bytes",
                    ));
                }
            }
            Payload::ToolCallFailed(p) => non_empty(errors, "tool_call_id", &p.tool_call_id),
            Payload::FileRead(p) => non_empty(errors, "path", &p.path),
            Payload::ProviderItemRecorded(p) => {
                non_empty(errors, "format", &p.format);
                if !p.item.is_object() {
                    errors.push(FieldError::new("payload.item", "expected a JSON object"));
                }
            }
            Payload::FileWritten(p) => non_empty(errors, "path", &p.path),
            Payload::DiffApplied(p) => non_empty(errors, "path", &p.path),
            Payload::BranchForked(p) => {
                non_empty(errors, "new_branch_id", &p.new_branch_id);
                non_empty(errors, "from_event_id", &p.from_event_id);
            }
            Payload::SessionStarted(p) => {
                if p.reserved_output_tokens >= p.context_window_tokens {
                    errors.push(FieldError::new(
                        "payload.reserved_output_tokens",
                        "must be smaller than context_window_tokens",
                    ));
                }
                if let Err(e) = crate::privacy::PrivacyDefaults::of_start(p) {
                    errors.push(e);
                }
                match p.extra.get("user_id") {
                    None | Some(Value::Null) | Some(Value::String(_)) => {}
                    Some(_) => errors.push(FieldError::new(
                        "payload.user_id",
                        "expected a string: the platform's id of the end user the session serves",
                    )),
                }
            }
            Payload::MemoryRecorded(p) if p.source_refs.is_empty() => {
                errors.push(FieldError::new(
                    "payload.source_refs",
                    "a memory needs at least one source ref",
                ));
            }
            _ => {}
        }
    }
}

/// A payload serialized as its fields ([`Payload::serialize_fields`]).
pub(crate) struct Fields<'a>(pub(crate) &'a Payload);

impl Serialize for Fields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_fields(s)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Provider and model name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default)]
    pub schema: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionStarted {
    pub model: ModelRef,
    pub context_window_tokens: u32,
    pub reserved_output_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_root: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSpec>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserPromptSubmitted {
    pub message_id: String,
    pub text: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

pub mod tool_args {
    //! The arguments of a tool call: a JSON object, or null (absent) when the call has none.
    //!
    //! OpenAI returns `function.arguments` as the object's JSON text and most platforms forward
    //! it as is, so a string that parses as a JSON object is taken as that object; anything else
    //! (other text, a number, an array, a string of an array) is refused with the field's path.
    //! The text itself is not kept: no provider needs the bytes back (OpenAI's renderer writes
    //! the object's compact JSON text, Anthropic's the object), key order is kept, and renders
    //! stay deterministic, so a provider's prompt cache sees the same prefix every time.

    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// The arguments `value` stands for, or why it stands for none.
    pub fn normalize(value: Value) -> Result<Value, String> {
        match value {
            Value::Null | Value::Object(_) => Ok(value),
            Value::String(text) => match serde_json::from_str::<Value>(&text) {
                Ok(object @ Value::Object(_)) => Ok(object),
                Ok(other) => Err(format!(
                    "expected a JSON object (or its JSON text), found a string holding {}",
                    crate::event::kind_of(&other)
                )),
                // Where it breaks, never the text: errors do not echo content.
                Err(e) => Err(format!(
                    "expected a JSON object (or its JSON text), found a string that is not \
                     JSON (it breaks on line {}, column {})",
                    e.line(),
                    e.column()
                )),
            },
            other => Err(format!(
                "expected a JSON object (or its JSON text), found {}",
                crate::event::kind_of(&other)
            )),
        }
    }

    /// Reads arguments as stored: the JSON text of an object becomes the object, anything else
    /// stays as it is, so that an event stored before this contract still reads back. New input
    /// is held to the contract by [`super::Payload::check_input`].
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(normalize(value.clone()).unwrap_or(value))
    }

    /// The JSON Schema of what [`normalize`] takes.
    pub(crate) fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // The field's doc comment gives the description.
        schemars::json_schema!({ "type": ["object", "string", "null"] })
    }
}

/// One tool call requested inside a model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    pub tool_call_id: String,
    pub name: String,
    /// A JSON object, or its JSON text (OpenAI's `function.arguments`), stored as the object;
    /// null or absent when the call has none (see [`tool_args`]).
    #[serde(default, deserialize_with = "tool_args::deserialize")]
    #[schemars(schema_with = "tool_args::schema")]
    pub args: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelResponseReceived {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_run_id: Option<String>,
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The payload field linking a model's response to the context it answered.
pub const ASSEMBLY_ID_FIELD: &str = "assembly_id";

impl ModelResponseReceived {
    /// The assembly (`ContextBuilt` record) whose context the model answered with this response,
    /// when the platform passed it back: "why did the model say this" is then one lookup
    /// (`GET /v1/assemblies/{id}`). Carried as a payload field of its own (`assembly_id`).
    pub fn assembly_id(&self) -> Option<&str> {
        self.extra.get(ASSEMBLY_ID_FIELD).and_then(Value::as_str)
    }

    fn assembly_id_error(&self) -> Option<&'static str> {
        let value = self.extra.get(ASSEMBLY_ID_FIELD)?;
        let well_formed = value.as_str().is_some_and(|id| {
            id.len() <= 64
                && id.strip_prefix("asm_").is_some_and(|rest| {
                    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric())
                })
        });
        (!well_formed).then_some(
            "expected the assembly_id of the context this response answers (`asm_…`, as the \
             context answer's `assembly.assembly_id` gives it)",
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallRequested {
    pub tool_call_id: String,
    pub name: String,
    /// A JSON object, or its JSON text (OpenAI's `function.arguments`), stored as the object;
    /// null or absent when the call has none (see [`tool_args`]).
    #[serde(default, deserialize_with = "tool_args::deserialize")]
    #[schemars(schema_with = "tool_args::schema")]
    pub args: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Privacy classes, from least to most protected.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PrivacyClass {
    Public,
    Internal,
    Confidential,
    Restricted,
}

impl PrivacyClass {
    pub fn as_str(self) -> &'static str {
        match self {
            PrivacyClass::Public => "public",
            PrivacyClass::Internal => "internal",
            PrivacyClass::Confidential => "confidential",
            PrivacyClass::Restricted => "restricted",
        }
    }
}

/// Freshness classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FreshnessClass {
    Volatile,
    Session,
    TimeBounded,
    Durable,
    Permanent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallFinished {
    pub tool_call_id: String,
    /// The raw output, when small enough to travel inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Artifact URI of an output stored in blob storage (`artifact:sha256:<hex>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    /// Head and tail of an output stored as an artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// Tokens of the full output (o200k), measured by ingest before it was offloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy_class: Option<PrivacyClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness_class: Option<FreshnessClass>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallFailed {
    pub tool_call_id: String,
    pub error: String,
    #[serde(default)]
    pub retryable: bool,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileRead {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileWritten {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DiffApplied {
    pub path: String,
    pub diff: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Explicit state from the agent. Present fields replace the branch's current value; absent
/// fields keep it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StateUpdated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_criteria: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_questions: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BranchForked {
    pub new_branch_id: String,
    pub from_event_id: String,
    /// `fork` (default) or `what_if`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubagentStarted {
    pub child_session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubagentFinished {
    pub child_session_id: String,
    pub report: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    pub status: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubagentPromoted {
    pub child_session_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRequested {
    pub approval_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Payload of `ApprovalGranted` and `ApprovalDenied`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalDecision {
    pub approval_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifierFinished {
    pub check: String,
    pub result: String,
    #[serde(default)]
    pub evidence_refs: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An item of a provider's conversation format that the other types do not model — a reasoning
/// item, a hosted tool's call (web or file search, code interpreter, computer use), an MCP list —
/// kept whole so that a platform's own history of the conversation reads back exactly as it was
/// written (the Agents SDK session keeps Responses API items this way). The projection keeps it
/// as an event and the assembler does not send it: what it means to a model is the provider's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderItemRecorded {
    /// The format the item belongs to, as the provider renderings name it (`openai-responses`).
    pub format: String,
    /// The item as the provider wrote it: a JSON object with its own `type`.
    pub item: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ProviderItemRecorded {
    /// The item's own `type`, when it has one.
    pub fn item_type(&self) -> Option<&str> {
        self.item.get("type").and_then(Value::as_str)
    }
}

/// A governed memory. The extractor that writes these is its own issue; the shape is
/// fixed here so the log can carry them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryRecorded {
    pub memory_id: String,
    pub scope: String,
    pub kind: String,
    pub text: String,
    pub source_refs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy_class: Option<PrivacyClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness_class: Option<FreshnessClass>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemorySuperseded {
    pub memory_id: String,
    pub superseded_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionCompleted {
    pub compaction_id: String,
    pub first_event_id: String,
    pub last_event_id: String,
    pub first_kept_event_id: String,
    pub tokens_before: u64,
    pub tokens_after: u64,
    #[serde(default)]
    pub summary: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An assembly was compiled for a model call; `assembly` is the full ContextAssembly record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextBuilt {
    pub assembly_id: String,
    pub context_tokens: u64,
    pub transcript_tokens: u64,
    #[serde(default)]
    pub assembly: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
