//! Claude Code session JSONL.

use crate::{Converter, Emitter, Record, Source};

/// The Claude Code converter.
#[derive(Debug)]
pub struct ClaudeCode {}

impl ClaudeCode {
    pub fn new(_source: &Source) -> Self {
        Self {}
    }
}

impl Converter for ClaudeCode {
    fn record(&mut self, _record: Record, _out: &mut Emitter<'_>) -> Result<(), String> {
        Err("the claude-code importer is not built yet".into())
    }
}
