//! SWE-agent `.traj` and mini-swe-agent `.traj.json`.

use crate::{Converter, Emitter, Record, Source};

/// The SWE-agent converter.
#[derive(Debug)]
pub struct SweAgent {}

impl SweAgent {
    pub fn new(_source: &Source) -> Self {
        Self {}
    }
}

impl Converter for SweAgent {
    fn record(&mut self, _record: Record, _out: &mut Emitter<'_>) -> Result<(), String> {
        Err("the swe-agent importer is not built yet".into())
    }
}

/// The mini-swe-agent converter.
#[derive(Debug)]
pub struct MiniSweAgent {}

impl MiniSweAgent {
    pub fn new(_source: &Source) -> Self {
        Self {}
    }
}

impl Converter for MiniSweAgent {
    fn record(&mut self, _record: Record, _out: &mut Emitter<'_>) -> Result<(), String> {
        Err("the mini-swe-agent importer is not built yet".into())
    }
}
