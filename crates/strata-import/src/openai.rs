//! OpenAI Chat Completions message lists and Responses API / Agents SDK items.

use crate::{Converter, Emitter, Record, Source};

/// The Chat Completions converter.
#[derive(Debug)]
pub struct Chat {}

impl Chat {
    pub fn new(_source: &Source) -> Self {
        Self {}
    }
}

impl Converter for Chat {
    fn record(&mut self, _record: Record, _out: &mut Emitter<'_>) -> Result<(), String> {
        Err("the openai-chat importer is not built yet".into())
    }
}

/// The Responses items converter.
#[derive(Debug)]
pub struct Responses {}

impl Responses {
    pub fn new(_source: &Source) -> Self {
        Self {}
    }
}

impl Converter for Responses {
    fn record(&mut self, _record: Record, _out: &mut Emitter<'_>) -> Result<(), String> {
        Err("the openai-responses importer is not built yet".into())
    }
}
