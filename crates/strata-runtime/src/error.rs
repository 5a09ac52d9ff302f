use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::Value;

/// An error answered over HTTP as `{"error": {"code", "message", "details"?}}`.
///
/// Messages say what is wrong and where; internal errors are logged in full and answered with a
/// generic message, so backend details never reach a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Value>,
}

/// Longest error message sent.
const MESSAGE_MAX_CHARS: usize = 2_000;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            // A message names the problem; it never echoes megabytes of the input back.
            message: strata_core::projection::truncate_chars(&message.into(), MESSAGE_MAX_CHARS),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// An internal failure: logged with its cause, answered without it.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the service log",
        )
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
                details: self.details.as_ref(),
            },
        };
        (self.status, Json(body)).into_response()
    }
}

/// A request body that must be a JSON object (serde would also take an array for a struct).
/// Its numbers are counts: one written with a zero fraction (`442.0`) is the integer JSON Schema
/// says it is (the OpenAPI document's `integer`), not an error.
pub fn parse_object<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid {what}: {e}")))?;
    let Some(fields) = value.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "invalid {what}: expected a JSON object"
        )));
    };
    fields.values_mut().for_each(whole_number_as_integer);
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("invalid {what}: {e}")))
}

/// `442.0` as `442`; any other value as it is.
fn whole_number_as_integer(value: &mut Value) {
    let Some(f) = value.as_f64().filter(|_| value.is_f64()) else {
        return;
    };
    // Every f64 without a fraction is an integer; those within u64 or i64 convert exactly.
    if f.fract() != 0.0 {
        return;
    }
    if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
        *value = Value::from(f as u64);
    } else if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
        *value = Value::from(f as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Counts {
        keep_turns: Option<usize>,
        budget: Option<u64>,
    }

    #[test]
    fn a_whole_number_written_with_a_fraction_is_an_integer_and_a_fraction_is_an_error() {
        let c: Counts = parse_object(br#"{"keep_turns": 442.0, "budget": 7}"#, "request").unwrap();
        assert_eq!((c.keep_turns, c.budget), (Some(442), Some(7)));
        let e = parse_object::<Counts>(br#"{"keep_turns": 2.5}"#, "request").unwrap_err();
        assert!(e.message.contains("2.5"), "{}", e.message);
        let e = parse_object::<Counts>(br#"{"keep_turns": -1.0}"#, "request").unwrap_err();
        assert!(e.message.contains("-1"), "{}", e.message);
        let e = parse_object::<Counts>(b"[1]", "request").unwrap_err();
        assert!(
            e.message.contains("expected a JSON object"),
            "{}",
            e.message
        );
    }
}
