//! The forms a history message goes in, and what the phases that choose among them share: the
//! renderings, the size over which a result goes by its memory, a retrieved text's message, and
//! which output lines say that something went wrong.

use super::BundleMessage;
use crate::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};

/// Results of completed turns longer than this are sent as their tool memory when one exists.
pub(super) const MEMORY_FIRST_MIN_CHARS: usize = 400;

/// A unit's message for retrieved content, and its tokens as sent (the envelope counted).
pub(super) fn data_message(
    source: &str,
    text: String,
    tokens: &dyn TokenCounter,
) -> (BundleMessage, u64) {
    let sent = tokens.count(&BundleMessage::data_envelope(source, &text)) + MESSAGE_OVERHEAD_TOKENS;
    (
        BundleMessage::Data {
            source: source.to_owned(),
            text,
        },
        sent,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rendering {
    /// The turn in progress: messages verbatim, artifact outputs as their stored preview.
    Current,
    /// The latest completed turn: messages verbatim, long outputs by their salient lines.
    Recent,
    /// An earlier turn of the verbatim window: messages verbatim, results by their tool memory
    /// where one exists (the raw output stays on the log, referenced).
    Older,
    /// An older turn: one line per step.
    Digest,
    /// An older step of the turn in progress: the message and its calls verbatim (what the
    /// model itself wrote is what it refers back to most), each result by its tool memory and
    /// its evidence lines.
    Aged,
    /// An older step of a completed turn: as [`Rendering::Aged`], but each result by its tool
    /// memory where one exists, as in older turns (the user has moved on since).
    AgedAnswered,
}

impl Rendering {
    pub(super) fn is_aged(self) -> bool {
        matches!(self, Rendering::Aged | Rendering::AgedAnswered)
    }
}

/// Whether a line of tool output says something went wrong.
pub(super) fn is_salient(line: &str) -> bool {
    const WORDS: [&[u8]; 7] = [
        b"error",
        b"fail",
        b"panic",
        b"assert",
        b"warning",
        b"exception",
        b"traceback",
    ];
    let bytes = line.as_bytes();
    WORDS.iter().any(|w| {
        bytes
            .windows(w.len())
            .any(|window| window.eq_ignore_ascii_case(w))
    })
}
