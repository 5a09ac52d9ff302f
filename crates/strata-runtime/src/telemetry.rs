//! Logs, and traces over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
//!
//! The spans are the `tracing` spans of the services (`http.request`, `ingest.batch`,
//! `projector.batch`, `derive.batch` of the memory extractor and the compactor,
//! `assembler.context`, …) exported by `tracing-opentelemetry` through a batching
//! `opentelemetry_sdk` provider. The exporter reads the standard variables itself: endpoint,
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`; gRPC is not
//! built in), headers and timeout; `OTEL_SERVICE_NAME` names the service (default: the binary's
//! name); `OTEL_BSP_SCHEDULE_DELAY` and the other batch settings apply. A request's W3C
//! `traceparent` header makes its spans children of the caller's span (see
//! [`crate::http_server`]), so Strata's spans nest under a platform's own model-call span.
//!
//! Which spans are exported is filtered apart from the logs: `STRATA_TRACE_FILTER` (an
//! `EnvFilter`, default `info`), so `RUST_LOG=warn` quiets the logs without losing the traces.

use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Keeps the trace exporter alive; dropping it sends the spans still buffered (call it last in
/// `main`, after the service stopped).
#[must_use = "dropping the guard stops exporting traces"]
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether traces are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("strata: could not flush the last traces: {e}");
            }
        }
    }
}

/// Installs the `tracing` subscriber: logs to standard error (`RUST_LOG` filters them, default
/// `default_level`; `STRATA_LOG_FORMAT=json` writes JSON lines), and the OTLP trace exporter
/// when an endpoint is configured. An exporter that cannot be built is reported and left out:
/// tracing is never a reason for a service not to start.
pub fn init_tracing(default_level: &str) -> Telemetry {
    let log_filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = std::env::var("STRATA_LOG_FORMAT").as_deref() == Ok("json");
    // Colours only on a terminal: a log redirected to a file stays plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let logs = if json {
        logs.json().with_filter(log_filter).boxed()
    } else {
        logs.with_filter(log_filter).boxed()
    };
    let (provider, problem) = match tracer_provider() {
        Ok(provider) => (provider, None),
        Err(e) => (None, Some(e)),
    };
    let traces = provider.as_ref().map(|p| {
        let filter = std::env::var("STRATA_TRACE_FILTER")
            .ok()
            .and_then(|f| EnvFilter::try_new(f).ok())
            .unwrap_or_else(|| EnvFilter::new("info"));
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("strata"))
            .with_filter(filter)
    });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init();
    if let Some(e) = problem {
        tracing::error!(error = %e, "traces are not exported: the OTLP exporter could not be built");
    }
    Telemetry { provider }
}

fn tracer_provider() -> Result<Option<SdkTracerProvider>, String> {
    let configured = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    if !configured {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| e.to_string())?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(binary_name());
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

fn binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "strata".to_owned())
}

/// Makes `span` a child of the trace the request's `traceparent` (and `tracestate`) header
/// names; a request without one, or with a malformed one, starts its own trace.
pub fn continue_trace(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
    // Fails only when the span is not exported (no OTel layer): nothing to continue then.
    let _ = span.set_parent(parent);
}

struct Headers<'h>(&'h axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
