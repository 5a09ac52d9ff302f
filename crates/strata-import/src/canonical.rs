//! Strata's canonical JSONL: one event per line, as `strata export` writes it. Events keep
//! their own ids; `--tenant` fills a missing `tenant_id` (and replaces it when forced),
//! `--session` replaces the session id.

use serde_json::Value;
use strata_core::Event;

use crate::{Converter, Emitter, Record};

/// The canonical converter.
#[derive(Debug, Default)]
pub struct Canonical;

impl Converter for Canonical {
    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let mut value = record.value;
        if let Value::Object(o) = &mut value {
            if out.options().force_tenant {
                o.insert("tenant_id".into(), out.tenant().into());
            }
            if let Some(s) = &out.options().session {
                o.insert("session_id".into(), s.clone().into());
            }
        }
        let event = Event::from_json(value, Some(out.tenant())).map_err(|e| {
            e.0.iter()
                .map(|f| format!("{}: {}", f.field, f.message))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        out.emit_canonical(event);
        Ok(())
    }
}
