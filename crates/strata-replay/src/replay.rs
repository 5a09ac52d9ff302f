//! `strata replay`: recorded sessions through the pure fold and the assembler, into a scratch
//! projection set (a SQLite file in a temporary directory, deleted afterwards), with a report of
//! every model call point.
//!
//! A model call point is an event that records a model call: `ContextBuilt` (an assembly the
//! assembler compiled) or `ModelResponseReceived` (a model's answer). At each one, the session's
//! state just before it is assembled under the recorded policy (the one the `ContextBuilt` record
//! names; the default for a response) and, when asked, under a candidate policy; the report gives
//! both bundles' token counts, the difference, and the segments the candidate adds or drops with
//! their reasons.
//!
//! Replay reads the log with [`EventLog::read`] and never appends to it; it never opens the live
//! projection store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use strata_keys::RecordCodec;

use chrono::{DateTime, Utc};
use serde::Serialize;
use strata_core::assembly::{
    assemble_with_policy, is_retired, retired_replay_note, AssemblyPolicy, ContextAssembly,
};
use strata_core::projection::LogPosition;
use strata_core::tokens::O200k;
use strata_core::{Event, Payload};
use strata_eval::{History, PointScore, Totals, DEFAULT_LAST_N};
use strata_log::EventLog;
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

use crate::eval::{raw_output, recorded_request, score_response, Histories};
use crate::fold::Folder;
use crate::source::{offsets_of, LogReader, Progress, Ticker};
use crate::{io_err, Error, Result};

/// Newest messages of a branch lineage read per snapshot (the assembler's default).
const WINDOW: u32 = 256;

/// Which sessions to replay. Empty fields select everything; a session is replayed whole when it
/// matches.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only these session ids.
    pub sessions: Vec<String>,
    /// Only sessions with an event at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only sessions with an event before this time.
    pub until: Option<DateTime<Utc>>,
}

impl Selection {
    fn matches_session(&self, e: &Event) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == e.tenant_id)
            && (self.sessions.is_empty() || self.sessions.contains(&e.session_id))
    }

    fn in_range(&self, e: &Event) -> bool {
        self.since.is_none_or(|s| e.timestamp >= s) && self.until.is_none_or(|u| e.timestamp < u)
    }
}

/// Options of a replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// The sessions.
    pub selection: Selection,
    /// A policy to compare with the recorded one.
    pub policy: Option<AssemblyPolicy>,
    /// Token budget of every assembly (default: the recorded one, or the window).
    pub budget: Option<u64>,
    /// Directory for the scratch projection set (default: a temporary directory). It must not
    /// hold a live set.
    pub scratch_dir: Option<PathBuf>,
    /// Where offloaded outputs are read back from, for the quality columns' history (without
    /// it, their previews stand in).
    pub blobs: Option<strata_blob::BlobStore>,
    /// Decodes the log's records (opening sealed ones with their keys).
    pub codec: RecordCodec,
}

/// Where the events come from.
#[derive(Debug)]
pub enum ReplaySource<'a> {
    /// The log, from offset 0 to its head.
    Log(&'a dyn EventLog),
    /// Events in file order (a JSONL export); positions are their line numbers.
    Events(Vec<Event>),
}

/// One bundle at a call point.
#[derive(Debug, Clone, Serialize)]
pub struct Bundle {
    /// Its policy.
    pub policy: String,
    /// Its assembly id.
    pub assembly_id: String,
    /// Tokens of the bundle.
    pub context_tokens: u64,
    /// Included segments.
    pub segments: usize,
}

/// A segment that one policy includes and the other does not.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentChange {
    /// Segment kind (`turn`, `turn_digest`, `task_state`, ...).
    pub kind: String,
    /// Its tier.
    pub tier: String,
    /// Its tokens.
    pub tokens: u64,
    /// Why it is there (added) or why not (dropped).
    pub reason: String,
    /// Events it comes from.
    pub source_event_ids: Vec<String>,
}

/// The report of one model call point.
#[derive(Debug, Clone, Serialize)]
pub struct CallPoint {
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    /// The call point's event.
    pub event_id: String,
    pub seq: u64,
    /// `context_built` or `model_response_received`.
    pub kind: &'static str,
    /// Tokens of the bundle as recorded on the log (a `ContextBuilt`'s record).
    pub logged_context_tokens: Option<u64>,
    /// Transcript replay tokens at that point.
    pub transcript_tokens: u64,
    /// The bundle under the recorded policy.
    pub recorded: Bundle,
    /// The recorded policy's version when it is retired (policy 8 stood in for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_policy: Option<String>,
    /// What [`Self::retired_policy`] means for the recorded bundle, in a sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_note: Option<String>,
    /// The bundle under the candidate policy (when one was given).
    pub candidate: Option<Bundle>,
    /// `candidate - recorded` tokens.
    pub token_diff: i64,
    /// Segments the candidate includes and the recorded policy does not.
    pub added: Vec<SegmentChange>,
    /// Segments the recorded policy includes and the candidate does not.
    pub dropped: Vec<SegmentChange>,
    /// At a recorded response: its evidence and how much of it each bundle holds (see
    /// [`crate::eval`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<Quality>,
}

/// The quality columns of a call point with a recorded response.
#[derive(Debug, Clone, Serialize)]
pub struct Quality {
    pub recorded: PointScore,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<PointScore>,
}

/// The summary of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub sessions: u64,
    pub events: u64,
    pub call_points: u64,
    /// Call points whose branch had no state to assemble (skipped).
    pub skipped_points: u64,
    pub recorded_policy: String,
    /// Call points whose recorded policy is retired, by its version: each was assembled under
    /// policy 8 instead (see [`strata_core::assembly::retired_replay_note`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub retired_policy_points: BTreeMap<String, u64>,
    pub candidate_policy: Option<String>,
    pub recorded_tokens: u64,
    pub candidate_tokens: Option<u64>,
    /// Events read from the source (all of the log, when replaying from it).
    pub events_scanned: u64,
    pub elapsed_secs: f64,
    /// Replayed events per second.
    pub events_per_sec: f64,
    /// Evidence recall and the baselines at the points with a recorded response, under the
    /// recorded policy.
    pub recorded_quality: Totals,
    /// The same under the candidate policy.
    pub candidate_quality: Option<Totals>,
    /// Every call point, in replay order.
    #[serde(skip)]
    pub points: Vec<CallPoint>,
}

/// Replays the selected sessions of `source`.
pub async fn replay(
    source: ReplaySource<'_>,
    options: &ReplayOptions,
    progress: Option<&mut (dyn FnMut(Progress) + Send)>,
) -> Result<ReplayReport> {
    let mut ticker = Ticker::new(progress);
    let Collected {
        order,
        mut by_session,
        scanned,
    } = collect(source, &options.selection, &options.codec).await?;
    let total_events: u64 = order.iter().map(|k| by_session[k].len() as u64).sum();

    let (_temp, scratch) = scratch_set(options.scratch_dir.as_ref()).await?;

    let recorded_default = AssemblyPolicy::default();
    let mut report = ReplayReport {
        sessions: 0,
        events: 0,
        call_points: 0,
        skipped_points: 0,
        recorded_policy: recorded_default.version.into(),
        retired_policy_points: BTreeMap::new(),
        candidate_policy: options.policy.map(|p| p.version.to_owned()),
        recorded_tokens: 0,
        candidate_tokens: options.policy.map(|_| 0),
        events_scanned: scanned,
        elapsed_secs: 0.0,
        events_per_sec: 0.0,
        recorded_quality: Totals::default(),
        candidate_quality: options.policy.map(|_| Totals::default()),
        points: Vec::new(),
    };
    let mut folder = Folder::new("strata-replay", false, 1);
    let total_sessions = order.len() as u64;
    for key in &order {
        let events = by_session.remove(key).unwrap_or_default();
        let mut histories = Histories::default();
        for (pos, mut event) in events {
            // Replay folds the log as it is: nothing is offloaded again.
            let raw = raw_output(&mut event, options.blobs.as_ref(), usize::MAX).await;
            let kind = match &event.payload {
                Payload::ContextBuilt(_) => Some("context_built"),
                Payload::ModelResponseReceived(_) => Some("model_response_received"),
                _ => None,
            };
            if let Some(kind) = kind {
                folder.flush(&scratch).await?;
                let history = histories.branch(&event.branch_id);
                match call_point(&scratch, &folder, &event, kind, options, history).await? {
                    Some(point) => {
                        report.call_points += 1;
                        if let Some(version) = &point.retired_policy {
                            *report
                                .retired_policy_points
                                .entry(version.clone())
                                .or_default() += 1;
                        }
                        report.recorded_tokens += point.recorded.context_tokens;
                        if let (Some(t), Some(c)) =
                            (report.candidate_tokens.as_mut(), point.candidate.as_ref())
                        {
                            *t += c.context_tokens;
                        }
                        if let Some(q) = &point.quality {
                            report.recorded_quality.add(&q.recorded);
                            if let (Some(t), Some(c)) =
                                (report.candidate_quality.as_mut(), q.candidate.as_ref())
                            {
                                t.add(c);
                            }
                        }
                        report.points.push(point);
                    }
                    None => report.skipped_points += 1,
                }
            }
            histories.remember(&event, raw);
            folder.fold(&scratch, vec![(pos, event)]).await?;
            report.events += 1;
            if folder.pending >= 5000 {
                folder.flush(&scratch).await?;
            }
        }
        folder.flush(&scratch).await?;
        report.sessions += 1;
        ticker.tick(report.events, total_events, report.sessions, total_sessions);
    }
    ticker.finish(report.events, total_events, report.sessions, total_sessions);
    report.elapsed_secs = ticker.elapsed().as_secs_f64();
    report.events_per_sec = report.events as f64 / report.elapsed_secs.max(1e-9);
    drop(scratch);
    Ok(report)
}

/// A fresh scratch projection set: a SQLite file in `dir`, or in a temporary directory that is
/// deleted with the returned guard.
pub(crate) async fn scratch_set(
    dir: Option<&PathBuf>,
) -> Result<(Option<tempfile::TempDir>, SqliteStore)> {
    let (temp, scratch_dir) = match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io_err(d))?;
            (None, d.clone())
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix("strata-replay-")
                .tempdir()
                .map_err(io_err(std::env::temp_dir()))?;
            let path = temp.path().to_owned();
            (Some(temp), path)
        }
    };
    let scratch_path = scratch_dir.join("replay-scratch.db");
    if scratch_path.exists() {
        return Err(Error::Invalid(format!(
            "{} exists: replay wants a fresh scratch set",
            scratch_path.display()
        )));
    }
    let scratch = SqliteStore::open(&scratch_path.display().to_string()).await?;
    Ok((temp, scratch))
}

/// The selected sessions' events, grouped by session in log order.
pub(crate) struct Collected {
    /// Sessions in the order of their first event.
    pub(crate) order: Vec<(String, String)>,
    pub(crate) by_session: HashMap<(String, String), Vec<(LogPosition, Event)>>,
    /// Events read from the source.
    pub(crate) scanned: u64,
}

/// Reads `source` and keeps the sessions `selection` matches (whole, when one of their events
/// is in its time range).
pub(crate) async fn collect(
    source: ReplaySource<'_>,
    selection: &Selection,
    codec: &RecordCodec,
) -> Result<Collected> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut by_session: HashMap<(String, String), Vec<(LogPosition, Event)>> = HashMap::new();
    let mut in_range: BTreeSet<(String, String)> = BTreeSet::new();
    let mut scanned = 0u64;
    let mut take = |pos: LogPosition, e: Event| {
        if !selection.matches_session(&e) {
            return;
        }
        let key = (e.tenant_id.clone(), e.session_id.clone());
        if selection.in_range(&e) {
            in_range.insert(key.clone());
        }
        by_session
            .entry(key.clone())
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push((pos, e));
    };
    match source {
        ReplaySource::Log(log) => {
            let head = offsets_of(&log.end_offsets().await?);
            let mut reader = LogReader::new(&Default::default(), &head, codec.clone());
            while let Some(chunk) = reader.next_chunk(log).await? {
                scanned += chunk.len() as u64;
                for (pos, e) in chunk {
                    take(pos, e);
                }
            }
        }
        ReplaySource::Events(events) => {
            for (i, e) in events.into_iter().enumerate() {
                scanned += 1;
                take(
                    LogPosition {
                        partition: 0,
                        offset: i as u64,
                    },
                    e,
                );
            }
        }
    }
    order.retain(|k| in_range.contains(k));
    by_session.retain(|k, _| in_range.contains(k));
    Ok(Collected {
        order,
        by_session,
        scanned,
    })
}

fn bundle(a: &ContextAssembly) -> Bundle {
    Bundle {
        policy: a.policy_version.clone(),
        assembly_id: a.assembly_id.clone(),
        context_tokens: a.context_tokens,
        segments: a.included.len(),
    }
}

async fn call_point(
    scratch: &SqliteStore,
    folder: &Folder,
    event: &Event,
    kind: &'static str,
    options: &ReplayOptions,
    history: &History,
) -> Result<Option<CallPoint>> {
    let Some(fold) = folder.session(&event.tenant_id, &event.session_id) else {
        return Ok(None);
    };
    let Some(snapshot) = scratch
        .snapshot(
            &event.tenant_id,
            &event.session_id,
            &event.branch_id,
            event.participant_id.as_deref(),
            WINDOW,
        )
        .await?
    else {
        return Ok(None);
    };
    // The recorded request, when the call point records it.
    let (logged, recorded) = match &event.payload {
        Payload::ContextBuilt(cb) => (
            Some(cb.context_tokens),
            serde_json::from_value::<ContextAssembly>(cb.assembly.clone()).ok(),
        ),
        _ => (None, None),
    };
    let (request, recorded_policy) = recorded_request(recorded.as_ref(), options.budget, None);
    let base_bundle = assemble_with_policy(&snapshot, &request, &recorded_policy, &O200k);
    let cand_bundle = options
        .policy
        .as_ref()
        .map(|policy| assemble_with_policy(&snapshot, &request, policy, &O200k));
    let quality = match &event.payload {
        Payload::ModelResponseReceived(response) => Some(Quality {
            recorded: score_response(history, response, &base_bundle, DEFAULT_LAST_N),
            candidate: cand_bundle
                .as_ref()
                .map(|c| score_response(history, response, c, DEFAULT_LAST_N)),
        }),
        _ => None,
    };
    let base = base_bundle.assembly;
    let mut point = CallPoint {
        tenant_id: event.tenant_id.clone(),
        session_id: event.session_id.clone(),
        branch_id: event.branch_id.clone(),
        event_id: event.event_id.clone(),
        seq: event.seq.unwrap_or(fold.head_seq + 1),
        kind,
        logged_context_tokens: logged,
        transcript_tokens: base.transcript_tokens,
        recorded: bundle(&base),
        retired_policy: recorded
            .as_ref()
            .map(|r| r.policy_version.clone())
            .filter(|v| is_retired(v)),
        policy_note: recorded
            .as_ref()
            .and_then(|r| retired_replay_note(&r.policy_version)),
        candidate: None,
        token_diff: 0,
        added: Vec::new(),
        dropped: Vec::new(),
        quality,
    };
    if let (Some(policy), Some(cand)) = (&options.policy, cand_bundle) {
        let cand = cand.assembly;
        point.token_diff = cand.context_tokens as i64 - base.context_tokens as i64;
        let seg_key = |kind: &str, src: &[String]| format!("{kind}\u{1f}{}", src.join(","));
        let base_keys: BTreeMap<String, &strata_core::assembly::Segment> = base
            .included
            .iter()
            .map(|s| (seg_key(&s.kind, &s.source_event_ids), s))
            .collect();
        let cand_keys: BTreeMap<String, &strata_core::assembly::Segment> = cand
            .included
            .iter()
            .map(|s| (seg_key(&s.kind, &s.source_event_ids), s))
            .collect();
        for (k, s) in &cand_keys {
            if !base_keys.contains_key(k) {
                point.added.push(SegmentChange {
                    kind: s.kind.clone(),
                    tier: format!("{:?}", s.tier),
                    tokens: s.tokens,
                    reason: s.reason.clone(),
                    source_event_ids: s.source_event_ids.clone(),
                });
            }
        }
        for (k, s) in &base_keys {
            if cand_keys.contains_key(k) {
                continue;
            }
            let why = cand
                .omitted_items
                .iter()
                .find(|o| o.source_event_ids == s.source_event_ids)
                .map(|o| {
                    format!(
                        "omitted as {} ({})",
                        o.kind,
                        serde_json::to_value(o.reason)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    )
                })
                .or_else(|| {
                    cand.included
                        .iter()
                        .find(|c| c.source_event_ids == s.source_event_ids)
                        .map(|c| format!("rendered as {} instead", c.kind))
                })
                .unwrap_or_else(|| format!("not rendered under {}", policy.version));
            point.dropped.push(SegmentChange {
                kind: s.kind.clone(),
                tier: format!("{:?}", s.tier),
                tokens: s.tokens,
                reason: why,
                source_event_ids: s.source_event_ids.clone(),
            });
        }
        point.candidate = Some(bundle(&cand));
    }
    Ok(Some(point))
}
