//! Provider adapters at the edge (SPEC principle 12): the core compiles a provider-neutral
//! bundle (messages, tool specs, the assembly record); this crate renders it as the request body
//! of the provider the caller chose. Nothing in `strata-core` knows a provider's format.

use serde::Serialize;
use serde_json::Value;
use strata_core::assembly::{Assembled, BundleMessage, ContextAssembly, Provider};
use strata_core::payload::ToolSpec;

pub mod render;

/// A bundle rendered for its provider: what the model call sends (`payload`) and the record
/// that explains it, with the payload's hash.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rendered {
    pub messages: Vec<BundleMessage>,
    pub tools: Vec<ToolSpec>,
    /// The provider request body.
    pub payload: Value,
    pub assembly: ContextAssembly,
}

/// The request body of `provider` for a bundle.
pub fn payload(
    provider: Provider,
    model: &str,
    messages: &[BundleMessage],
    tools: &[ToolSpec],
    max_output_tokens: u32,
) -> Value {
    match provider {
        Provider::Openai => render::openai(model, messages, tools),
        Provider::Anthropic => render::anthropic(model, messages, tools, max_output_tokens),
        Provider::OpenaiResponses => render::openai_responses(model, messages, tools),
    }
}

/// Renders an assembled bundle for the provider its request named, and records the SHA-256 of
/// the payload bytes in the assembly.
pub fn render(assembled: Assembled) -> Rendered {
    let Assembled {
        messages,
        tools,
        max_output_tokens,
        mut assembly,
    } = assembled;
    let payload = payload(
        assembly.provider,
        &assembly.model,
        &messages,
        &tools,
        max_output_tokens,
    );
    let bytes = serde_json::to_vec(&payload).expect("a JSON value serializes");
    assembly.payload_sha256 = strata_core::sha256_hex(&bytes);
    Rendered {
        messages,
        tools,
        payload,
        assembly,
    }
}
