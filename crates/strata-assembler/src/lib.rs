//! The context assembler: reads a snapshot of the projections, runs the core's pure
//! [`strata_core::assembly::assemble`], and records the result on the log as a `ContextBuilt`
//! event, so every assembly is itself replayable and auditable.
//!
//! A request reflects every event appended before it: the assembler waits, bounded, for the
//! projections to reach the session's log head, and marks the assembly
//! (`projection_complete: false`) when they did not in time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;
use strata_core::assembly::{
    assemble_with_policy, explain, explain_matches, rehydration_plan_with_policy, AssemblyPolicy,
    AssemblyRequest, ContextAssembly, Provider, RehydrationDecision,
};
use strata_core::payload::{ContextBuilt, Payload};
use strata_core::tokens::{CachedCounter, O200k};
use strata_core::Event;
use strata_ingest::{Ingestor, Publisher};
pub use strata_providers::Rendered;
use strata_runtime::Backends;

pub mod eval;
pub mod forgets;
pub mod http;
pub mod resume;
pub mod ui;
pub mod withhold;

/// Errors of the assembler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No such session (or branch) for this tenant.
    #[error("session {session:?} (branch {branch:?}) not found")]
    NotFound { session: String, branch: String },
    /// A request parameter is invalid.
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Store(#[from] strata_store::Error),
    #[error("could not record the assembly on the log: {0}")]
    Record(String),
}

/// Options of the assembler.
#[derive(Debug, Clone)]
pub struct AssemblerOptions {
    /// Newest messages of a branch lineage read per request.
    pub window: u32,
    /// Longest wait for the projections to reach the session's log head.
    pub max_projection_wait: Duration,
    /// Whether each assembly is appended to the log as `ContextBuilt`.
    pub record_assemblies: bool,
    /// The projector's consumer group (its offsets say how far the projections reach).
    pub projector_group: String,
    /// Per tenant, the providers allowed to receive `confidential` raw payloads.
    pub confidential_providers: BTreeMap<String, BTreeSet<Provider>>,
    /// Most raw bytes rehydrated into one context.
    pub rehydrate_max_bytes: u64,
    /// The context size to aim for when a request names none (see
    /// [`AssemblyRequest::target_tokens`]); `None`: the policy's own sizes.
    pub target_tokens: Option<u64>,
    /// The deployment's admin credential (the cross-tenant routes); `None`: they are refused.
    pub admin_key: Option<strata_runtime::auth::AdminKey>,
}

impl Default for AssemblerOptions {
    fn default() -> Self {
        Self {
            window: 256,
            max_projection_wait: Duration::from_secs(5),
            record_assemblies: true,
            projector_group: strata_runtime::PROJECTOR_GROUP.into(),
            confidential_providers: BTreeMap::new(),
            rehydrate_max_bytes: strata_core::assembly::DEFAULT_REHYDRATE_MAX_BYTES,
            target_tokens: None,
            admin_key: None,
        }
    }
}

/// What a caller asks for (the JSON body of `POST /v1/sessions/{id}/context`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub participant: Option<String>,
    /// Payload format (default: the provider the session's `SessionStarted` named, else
    /// `openai`).
    #[serde(default)]
    pub provider: Option<Provider>,
    /// Token budget (capped by the window minus reserved output).
    #[serde(default)]
    pub budget: Option<u64>,
    /// The request about to be sent, when not yet on the log.
    #[serde(default)]
    pub request: Option<String>,
    /// Completed turns kept verbatim (default 3).
    #[serde(default)]
    pub verbatim_turns: Option<usize>,
    /// Assembly policy version (default: the current one).
    #[serde(default)]
    pub policy: Option<String>,
    /// Artifacts needed byte for byte (artifact refs or tool call ids); rehydrated from blob
    /// storage only when selection, privacy, provider and byte budget allow.
    #[serde(default)]
    pub rehydrate: Vec<String>,
    /// Record the full per-candidate trace with the assembly (default: the compact record).
    #[serde(default)]
    pub trace: bool,
    /// The context size to aim for, below the budget: lower trades recall for cost (default: the
    /// deployment's `STRATA_TARGET_TOKENS`, else the policy's own rule: policy 12 stops at its
    /// price per token).
    #[serde(default)]
    pub target_tokens: Option<u64>,
}

/// The assembly policy settings of a deployment, as flags and environment (shared by the
/// `strata-assembler` binary and `strata`).
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyOpts {
    /// Per tenant, the providers allowed to receive `confidential` raw payloads:
    /// `tenant=provider[,provider][;tenant=...]`. `restricted` payloads never go to any provider.
    #[arg(long, global = true, env = "STRATA_CONFIDENTIAL_PROVIDERS", value_parser = parse_confidential_providers, default_value = "")]
    pub confidential_providers: BTreeMap<String, BTreeSet<Provider>>,
    /// Most raw artifact bytes rehydrated into one context.
    #[arg(long, global = true, env = "STRATA_REHYDRATE_MAX_BYTES", default_value_t = strata_core::assembly::DEFAULT_REHYDRATE_MAX_BYTES)]
    pub rehydrate_max_bytes: u64,
    /// The context size to aim for when a request names none (tokens; lower trades recall for
    /// cost). Unset: the policy's own rule (policy 12: the smallest sufficient context, by its
    /// price per token).
    #[arg(long, global = true, env = "STRATA_TARGET_TOKENS")]
    pub target_tokens: Option<u64>,
}

impl Default for PolicyOpts {
    fn default() -> Self {
        Self {
            confidential_providers: BTreeMap::new(),
            rehydrate_max_bytes: strata_core::assembly::DEFAULT_REHYDRATE_MAX_BYTES,
            target_tokens: None,
        }
    }
}

impl PolicyOpts {
    /// `options` with these settings.
    pub fn apply(&self, options: AssemblerOptions) -> AssemblerOptions {
        AssemblerOptions {
            confidential_providers: self.confidential_providers.clone(),
            rehydrate_max_bytes: self.rehydrate_max_bytes,
            target_tokens: self.target_tokens,
            ..options
        }
    }
}

/// Events read per page while `why_not` looks for the events that carry a tool call id.
const WHY_NOT_PAGE: u32 = 1_000;

/// Why a record is, or is not, in an assembly: [`strata_core::assembly::explain`], and when the
/// record names no event of it directly, `reference` read as a tool call id of the session —
/// answered for each event that carries it (the call and its result).
///
/// `tenant` is the caller's (authenticated) tenant: events are read under it, never under the
/// tenant written inside the record, and a record naming another tenant is refused (a tenant can
/// post a `ContextBuilt` of its own making).
pub async fn explain_reference(
    backends: &Backends,
    tenant: &str,
    assembly: &ContextAssembly,
    reference: &str,
) -> Result<Vec<String>, Error> {
    if assembly.tenant_id != tenant {
        return Err(Error::BadRequest(format!(
            "assembly {:?} names another tenant than the one it is stored under; refused",
            assembly.assembly_id
        )));
    }
    let direct = explain_matches(assembly, reference);
    if !direct.is_empty() {
        return Ok(direct);
    }
    // Only events up to the assembly's snapshot can be in it: the scan stops there, a page at
    // a time, however long the session has grown since.
    let mut lines = Vec::new();
    let mut after = 0;
    loop {
        let page = backends
            .store
            .events(tenant, &assembly.session_id, after, WHY_NOT_PAGE)
            .await?;
        let within = page.iter().take_while(|e| {
            e["seq"]
                .as_u64()
                .is_some_and(|s| s <= assembly.snapshot_seq)
        });
        for e in within {
            let payload = &e["payload"];
            let carries = payload["tool_call_id"] == reference
                || payload["tool_calls"]
                    .as_array()
                    .is_some_and(|calls| calls.iter().any(|c| c["tool_call_id"] == reference));
            if !carries {
                continue;
            }
            let id = e["event_id"].as_str().unwrap_or_default();
            let kind = e["type"].as_str().unwrap_or_default();
            let found = explain(assembly, id);
            lines.extend(found.into_iter().map(|l| format!("{kind} {id}: {l}")));
        }
        match page.last().and_then(|e| e["seq"].as_u64()) {
            Some(seq) if page.len() == WHY_NOT_PAGE as usize && seq < assembly.snapshot_seq => {
                after = seq
            }
            _ => break,
        }
    }
    if lines.is_empty() {
        lines = explain(assembly, reference);
    }
    Ok(lines)
}

/// Parses a per-tenant provider allow-list for `confidential` raw payloads:
/// `tenant=provider,provider;tenant=provider` (e.g. `acme=anthropic;globex=openai,anthropic`).
pub fn parse_confidential_providers(
    spec: &str,
) -> Result<BTreeMap<String, BTreeSet<Provider>>, String> {
    let mut out: BTreeMap<String, BTreeSet<Provider>> = BTreeMap::new();
    for (i, entry) in spec.split(';').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let (tenant, providers) = entry.split_once('=').ok_or_else(|| {
            format!(
                "confidential providers, entry {}: {entry:?} is not tenant=provider[,provider]",
                i + 1
            )
        })?;
        let tenant = tenant.trim();
        if tenant.is_empty() {
            return Err(format!(
                "confidential providers, entry {}: empty tenant",
                i + 1
            ));
        }
        let set = out.entry(tenant.to_owned()).or_default();
        for p in providers
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            set.insert(
                p.parse()
                    .map_err(|e| format!("confidential providers, tenant {tenant}: {e}"))?,
            );
        }
    }
    Ok(out)
}

/// The assembler service.
#[derive(Debug, Clone)]
pub struct Assembler {
    backends: Backends,
    ingestor: Arc<Ingestor>,
    options: AssemblerOptions,
    /// Token counts of segments already seen: the next call of a session mostly re-sends them.
    tokens: Arc<CachedCounter<O200k>>,
    /// One `GET /v1/sessions/{id}/eval` at a time (each re-folds its session).
    evaluations: Arc<tokio::sync::Semaphore>,
    /// The tenants' forgets this assembler runs, while they run.
    forget_jobs: Arc<forgets::Jobs>,
}

/// Token counts kept by one assembler.
const TOKEN_CACHE_ENTRIES: usize = 200_000;

impl Assembler {
    pub fn new(backends: Backends, ingestor: Arc<Ingestor>, options: AssemblerOptions) -> Self {
        Self {
            backends,
            ingestor,
            options,
            tokens: Arc::new(CachedCounter::new(O200k, TOKEN_CACHE_ENTRIES)),
            evaluations: Arc::new(tokio::sync::Semaphore::new(1)),
            forget_jobs: Arc::default(),
        }
    }

    pub fn options(&self) -> &AssemblerOptions {
        &self.options
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// Loads what the first request would otherwise load lazily (the o200k tokenizer's tables),
    /// so that a service reports ready only once its first context costs what the rest do.
    pub async fn warm(&self) {
        let started = Instant::now();
        let tokens = self.tokens.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || {
            use strata_core::tokens::TokenCounter;
            tokens.count("warm the tokenizer")
        })
        .await
        {
            tracing::warn!(error = %e, "warming the tokenizer failed; the first request loads it");
        }
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(elapsed_ms, "assembler warm");
    }

    /// Assembles the context of the next model call of `session` for `tenant`.
    pub async fn context(
        &self,
        tenant: &str,
        session: &str,
        request: &ContextRequest,
    ) -> Result<Rendered, Error> {
        self.context_and_record(tenant, session, request)
            .await
            .map(|(assembled, _)| assembled)
    }

    /// [`Assembler::context`], also saying whether the assembly was recorded on the log. A
    /// failure to record (the log or the hot state unavailable) does not fail the request: the
    /// caller gets its context, the failure is logged and counted
    /// (`strata_assembler_unrecorded_total`), and `false` says so.
    #[tracing::instrument(
        name = "assembler.context",
        skip(self, request),
        fields(
            gen_ai.operation.name = "context_assembly",
            gen_ai.conversation.id = session,
            gen_ai.request.model = tracing::field::Empty,
            gen_ai.provider.name = tracing::field::Empty,
            strata.branch = tracing::field::Empty,
            strata.policy = tracing::field::Empty,
            strata.budget_tokens = tracing::field::Empty,
            strata.context_tokens = tracing::field::Empty,
            strata.transcript_tokens = tracing::field::Empty,
            strata.included = tracing::field::Empty,
            strata.omitted = tracing::field::Empty,
            strata.assembly_id = tracing::field::Empty,
            strata.recorded = tracing::field::Empty,
        )
    )]
    pub async fn context_and_record(
        &self,
        tenant: &str,
        session: &str,
        request: &ContextRequest,
    ) -> Result<(Rendered, bool), Error> {
        let started = Instant::now();
        let branch = request
            .branch
            .clone()
            .unwrap_or_else(|| strata_core::MAIN_BRANCH.to_owned());
        if request.budget == Some(0) {
            return Err(Error::BadRequest("budget must be at least 1 token".into()));
        }
        if request.target_tokens == Some(0) {
            return Err(Error::BadRequest(
                "target_tokens must be at least 1 token".into(),
            ));
        }
        // They name the branch and participant of the assembly record on the log: checked as
        // every event's ids are, so that the record reads back.
        for (field, value) in [
            ("branch", request.branch.as_deref()),
            ("participant", request.participant.as_deref()),
        ] {
            if let Some(value) = value {
                strata_core::event::check_id(field, value)
                    .map_err(|e| Error::BadRequest(e.to_string()))?;
            }
        }
        let complete = self.wait_for_projection(tenant, session).await?;
        let snapshot = self
            .backends
            .store
            .snapshot(
                tenant,
                session,
                &branch,
                request.participant.as_deref(),
                self.options.window,
            )
            .await?
            .ok_or_else(|| Error::NotFound {
                session: session.to_owned(),
                branch: branch.clone(),
            })?;
        let snapshot_us = started.elapsed().as_micros() as u64;
        let policy = match &request.policy {
            None => AssemblyPolicy::default(),
            Some(v) => AssemblyPolicy::requested(v)
                .map_err(|e| Error::BadRequest(format!("policy: {e}")))?,
        };
        let provider = match request.provider {
            Some(p) => p,
            None => self.session_provider(tenant, session).await?,
        };
        let mut assembly_request = AssemblyRequest {
            provider,
            budget: request.budget,
            request: request.request.clone(),
            verbatim_turns: request.verbatim_turns.unwrap_or(3),
            confidential_allowed: self
                .options
                .confidential_providers
                .get(tenant)
                .is_some_and(|allowed| allowed.iter().any(|p| p.vendor() == provider.vendor())),
            rehydrate: request.rehydrate.clone(),
            rehydrate_max_bytes: self.options.rehydrate_max_bytes,
            target_tokens: request.target_tokens.or(self.options.target_tokens),
            ..AssemblyRequest::default()
        };
        assembly_request.rehydrated = self
            .read_rehydrated(
                tenant,
                &rehydration_plan_with_policy(&snapshot, &assembly_request, &policy),
            )
            .await;
        let mut assembled = strata_providers::render(assemble_with_policy(
            &snapshot,
            &assembly_request,
            &policy,
            self.tokens.as_ref(),
        ));
        assembled.assembly.projection_complete = complete;
        assembled
            .assembly
            .timings_us
            .insert("snapshot".into(), snapshot_us);
        assembled.assembly.timings_us.insert(
            "assemble".into(),
            started.elapsed().as_micros() as u64 - snapshot_us,
        );
        strata_runtime::metrics::ASSEMBLIES.add(1);
        strata_runtime::metrics::ASSEMBLY_LATENCY.observe(started.elapsed());
        let mut recorded = false;
        if self.options.record_assemblies {
            match self.record(&assembled, request.trace).await {
                Ok(()) => recorded = true,
                Err(e) => {
                    strata_runtime::metrics::ASSEMBLIES_UNRECORDED.add(1);
                    tracing::error!(tenant, session, assembly_id = %assembled.assembly.assembly_id,
                        error = %e, "assembled, but could not record the assembly on the log");
                }
            }
        }
        record_on_span(&assembled.assembly, recorded);
        Ok((assembled, recorded))
    }

    /// Reads the raw bytes of the artifacts a rehydration plan admitted. An artifact that cannot
    /// be read is left out (the core then records the refusal); its bytes are never logged.
    async fn read_rehydrated(
        &self,
        tenant: &str,
        plan: &[RehydrationDecision],
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for d in plan.iter().filter(|d| d.rehydrated) {
            let Some(uri) = &d.artifact_ref else { continue };
            let Some(sha) = uri.strip_prefix("artifact:sha256:") else {
                continue;
            };
            match self.backends.blobs.get_artifact(tenant, sha).await {
                Ok(Some(bytes)) => match String::from_utf8(bytes.to_vec()) {
                    Ok(text) => {
                        out.insert(uri.clone(), text);
                    }
                    Err(_) => {
                        tracing::warn!(tenant, artifact = %uri, "artifact is not UTF-8 text; not rehydrated")
                    }
                },
                Ok(None) => {
                    tracing::warn!(tenant, artifact = %uri, "artifact missing from blob storage")
                }
                Err(e) => {
                    tracing::warn!(tenant, artifact = %uri, error = %e, "could not read artifact")
                }
            }
        }
        out
    }

    /// Waits, bounded, until the projections hold every event appended for the session before
    /// this call. Fast path: the hot state's log head against the projected seq. When the hot
    /// state does not know the head (expired, flushed) or is down, the log decides: the end of
    /// the session's partition now, against the projector's offset in the projection store.
    /// The payload format of a session's own provider (its `SessionStarted`'s
    /// `model.provider`): `anthropic` renders for Anthropic, anything else the default format.
    async fn session_provider(&self, tenant: &str, session: &str) -> Result<Provider, Error> {
        let named = self
            .backends
            .store
            .session_provider(tenant, session)
            .await?;
        Ok(match named.as_deref() {
            Some(p) if p.eq_ignore_ascii_case("anthropic") => Provider::Anthropic,
            _ => Provider::default(),
        })
    }

    async fn wait_for_projection(&self, tenant: &str, session: &str) -> Result<bool, Error> {
        let b = &self.backends;
        let deadline = Instant::now() + self.options.max_projection_wait;
        let log_head = match b.hot.log_head(tenant, session).await {
            Ok(Some(head)) => head,
            Ok(None) => return self.wait_for_partition(session, deadline).await,
            Err(e) => {
                tracing::warn!(tenant, session, error = %e,
                    "hot state unavailable; checking the projections against the log");
                return self.wait_for_partition(session, deadline).await;
            }
        };
        loop {
            let projected = match b.hot.projected(tenant, session).await {
                Ok(Some(p)) => p.projected_seq,
                _ => b
                    .store
                    .session_fold(tenant, session)
                    .await?
                    .map(|f| f.head_seq)
                    .unwrap_or(0),
            };
            if projected >= log_head {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    tenant,
                    session,
                    log_head,
                    projected,
                    "projections lag the log; assembling from what is projected"
                );
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the projector has passed the end of the session's partition as of now.
    async fn wait_for_partition(&self, session: &str, deadline: Instant) -> Result<bool, Error> {
        let b = &self.backends;
        let partition = b.log.partition_for_key(session.as_bytes());
        let end = match b.log.end_offsets().await {
            Ok(ends) => ends.get(partition as usize).copied().unwrap_or(0),
            Err(e) => {
                tracing::warn!(session, error = %e,
                    "the log is unavailable; cannot confirm the projections are complete");
                return Ok(false);
            }
        };
        loop {
            let projected_to = b
                .store
                .offsets(&self.options.projector_group)
                .await?
                .get(&partition)
                .copied()
                .unwrap_or(0);
            if projected_to >= end {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    session,
                    partition,
                    end,
                    projected_to,
                    "projections lag the log; assembling from what is projected"
                );
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Appends the assembly to the log as a `ContextBuilt` event. Its id derives from the
    /// assembly id, so recording the same assembly twice has one effect.
    /// Production assemblies record the compact form (counts by reason, selected refs); with
    /// `trace` the full per-candidate trace.
    async fn record(&self, assembled: &Rendered, trace: bool) -> Result<(), Error> {
        let compact;
        let a = if trace {
            &assembled.assembly
        } else {
            compact = assembled.assembly.compact();
            &compact
        };
        let event = Event {
            event_id: format!("ctx_{}", a.assembly_id),
            tenant_id: a.tenant_id.clone(),
            session_id: a.session_id.clone(),
            branch_id: a.branch_id.clone(),
            seq: None,
            parent_event_id: None,
            timestamp: strata_core::event::truncate_to_micros(chrono::Utc::now()),
            actor: Some("strata-assembler".into()),
            participant_id: Some(a.participant_id.clone()),
            payload: Payload::ContextBuilt(ContextBuilt {
                assembly_id: a.assembly_id.clone(),
                context_tokens: a.context_tokens,
                transcript_tokens: a.transcript_tokens,
                assembly: serde_json::to_value(a).unwrap_or_else(|_| json!({})),
                extra: Default::default(),
            }),
            causality: None,
            extra: Default::default(),
        };
        self.ingestor
            .ingest(&Publisher::Operator, vec![(event, None)])
            .await
            .map(|_| ())
            .map_err(|e| Error::Record(e.to_string()))
    }
}

/// What a trace says of an assembly (the `assembler.context` span's fields): the model and
/// provider, and the budget, sizes and counts of the record; never its contents.
fn record_on_span(assembly: &strata_core::assembly::ContextAssembly, recorded: bool) {
    let span = tracing::Span::current();
    span.record("gen_ai.request.model", assembly.model.as_str());
    span.record("gen_ai.provider.name", assembly.provider.vendor());
    span.record("strata.branch", assembly.branch_id.as_str());
    span.record("strata.policy", assembly.policy_version.as_str());
    span.record("strata.budget_tokens", int(assembly.budget_tokens));
    span.record("strata.context_tokens", int(assembly.context_tokens));
    span.record("strata.transcript_tokens", int(assembly.transcript_tokens));
    span.record("strata.included", int(assembly.included.len() as u64));
    span.record(
        "strata.omitted",
        int(assembly.omitted.values().sum::<u64>()),
    );
    span.record("strata.assembly_id", assembly.assembly_id.as_str());
    span.record("strata.recorded", recorded);
}

/// A count as a span attribute: OTLP integers are signed (an unsigned field would be exported as
/// its text).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
