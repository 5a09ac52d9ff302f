//! Codex CLI rollout JSONL.

use crate::{Converter, Emitter, Record, Source};

/// The Claude Code converter.
#[derive(Debug)]
pub struct Codex {}

impl Codex {
    pub fn new(_source: &Source) -> Self {
        Self {}
    }
}

impl Converter for Codex {
    fn record(&mut self, _record: Record, _out: &mut Emitter<'_>) -> Result<(), String> {
        Err("the codex importer is not built yet".into())
    }
}
