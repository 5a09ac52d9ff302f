//! How a session classes the tool outputs that carry no privacy class (the seeds' R3 and R12:
//! what cannot be judged is withheld). A platform writes the rule in its `SessionStarted`
//! (`"privacy": {"unlabelled": "restricted", "tools": {"vault.read": "restricted"}}`), or ingest
//! stamps the tenant's configured rule there. Being on the log, the rule folds the same way on
//! every rebuild and replay.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::payload::{PrivacyClass, SessionStarted};
use crate::FieldError;

/// The field of `SessionStarted` that holds the rule.
pub const PRIVACY_FIELD: &str = "privacy";

/// The privacy rule of a session. Empty: an output is as private as its event says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyDefaults {
    /// The class of an output whose event states none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlabelled: Option<PrivacyClass>,
    /// The least class of every output of these tools, whatever the event states.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, PrivacyClass>,
}

impl PrivacyDefaults {
    /// The rule a `SessionStarted` carries (none when it carries none).
    pub fn of_start(start: &SessionStarted) -> Result<Self, FieldError> {
        match start.extra.get(PRIVACY_FIELD) {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(v) => crate::event::parse_at(v.clone(), &format!("payload.{PRIVACY_FIELD}")),
        }
    }

    /// Each class the stricter of the two rules': an operator's tenant rule is a floor the
    /// platform's own rule cannot lower.
    pub fn stricter(&self, other: &PrivacyDefaults) -> PrivacyDefaults {
        let mut tools = self.tools.clone();
        for (tool, class) in &other.tools {
            let entry = tools.entry(tool.clone()).or_insert(*class);
            *entry = (*entry).max(*class);
        }
        PrivacyDefaults {
            unlabelled: self.unlabelled.max(other.unlabelled),
            tools,
        }
    }

    /// Parses the per-tenant rules of `STRATA_PRIVACY_DEFAULTS`:
    /// `{"acme": {"unlabelled": "restricted", "tools": {"vault.read": "restricted"}}}`.
    pub fn parse_per_tenant(spec: &str) -> Result<BTreeMap<String, PrivacyDefaults>, String> {
        if spec.trim().is_empty() {
            return Ok(BTreeMap::new());
        }
        serde_json::from_str(spec).map_err(|e| {
            format!(
                "privacy defaults: {e}; expected {{\"<tenant>\": {{\"unlabelled\": \"restricted\", \
                 \"tools\": {{\"<tool>\": \"confidential\"}}}}}}"
            )
        })
    }

    /// The rule a folder applies: [`PrivacyDefaults::of_start`], or — for a rule that does not
    /// parse, which ingest refuses but a record written around it may carry — every unlabelled
    /// output withheld rather than none.
    pub fn folded_from(start: &SessionStarted) -> Self {
        Self::of_start(start).unwrap_or(PrivacyDefaults {
            unlabelled: Some(PrivacyClass::Restricted),
            tools: BTreeMap::new(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.unlabelled.is_none() && self.tools.is_empty()
    }

    /// The class an output of `tool` stated as `stated` is held to: the stricter of what the
    /// event says and the tool's rule; the `unlabelled` class when neither says anything.
    pub fn class_of(&self, stated: Option<PrivacyClass>, tool: &str) -> Option<PrivacyClass> {
        let by_tool = self.tools.get(tool).copied();
        match (stated, by_tool) {
            (Some(s), Some(t)) => Some(s.max(t)),
            (Some(c), None) | (None, Some(c)) => Some(c),
            (None, None) => self.unlabelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stricter_class_wins_and_unlabelled_fills_only_silence() {
        let rule = PrivacyDefaults {
            unlabelled: Some(PrivacyClass::Confidential),
            tools: [("vault.read".to_owned(), PrivacyClass::Restricted)].into(),
        };
        use PrivacyClass::*;
        assert_eq!(rule.class_of(None, "ls"), Some(Confidential));
        assert_eq!(rule.class_of(Some(Public), "ls"), Some(Public));
        assert_eq!(rule.class_of(Some(Public), "vault.read"), Some(Restricted));
        assert_eq!(rule.class_of(None, "vault.read"), Some(Restricted));
        assert_eq!(PrivacyDefaults::default().class_of(None, "ls"), None);
    }

    #[test]
    fn a_tenant_floor_cannot_be_lowered_and_bad_specs_say_why() {
        let floor = PrivacyDefaults::parse_per_tenant(
            r#"{"acme": {"unlabelled": "restricted", "tools": {"crm": "confidential"}}}"#,
        )
        .unwrap();
        let platform = PrivacyDefaults {
            unlabelled: Some(PrivacyClass::Public),
            tools: [("crm".to_owned(), PrivacyClass::Public)].into(),
        };
        let merged = platform.stricter(&floor["acme"]);
        assert_eq!(merged.unlabelled, Some(PrivacyClass::Restricted));
        assert_eq!(merged.tools["crm"], PrivacyClass::Confidential);
        let err = PrivacyDefaults::parse_per_tenant(r#"{"acme": {"unlabeled": "x"}}"#).unwrap_err();
        assert!(err.contains("unlabeled"), "{err}");
    }
}
