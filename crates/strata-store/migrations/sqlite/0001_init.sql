-- Strata projections (SPEC §5). Every table is keyed by tenant first: no query crosses tenants.

-- Consumer offsets of the projector, written in the same transaction as the rows they cover.
CREATE TABLE consumer_offsets (
    group_id    TEXT    NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (group_id, partition)
);

-- The fold state of each session (branches, agent state, open tool calls, counters) as JSON.
CREATE TABLE session_folds (
    tenant_id  TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    head_seq   INTEGER NOT NULL,
    event_count INTEGER NOT NULL,
    fold       TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);

CREATE TABLE sessions (
    tenant_id              TEXT    NOT NULL,
    session_id             TEXT    NOT NULL,
    started_event_id       TEXT    NOT NULL,
    provider               TEXT    NOT NULL,
    model                  TEXT    NOT NULL,
    context_window_tokens  INTEGER NOT NULL,
    reserved_output_tokens INTEGER NOT NULL,
    system_prompt          TEXT,
    system_prompt_tokens   INTEGER NOT NULL,
    tools                  TEXT    NOT NULL,
    tools_tokens           INTEGER NOT NULL,
    parent_session_id      TEXT,
    PRIMARY KEY (tenant_id, session_id)
);

CREATE TABLE branches (
    tenant_id        TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    branch_id        TEXT NOT NULL,
    parent_branch_id TEXT,
    fork_event_id    TEXT,
    kind             TEXT NOT NULL,
    created_event_id TEXT NOT NULL,
    PRIMARY KEY (tenant_id, session_id, branch_id)
);

-- Every accepted event, canonical JSON included (export, audit, rebuild checks).
CREATE TABLE events (
    tenant_id         TEXT    NOT NULL,
    session_id        TEXT    NOT NULL,
    seq               INTEGER NOT NULL,
    event_id          TEXT    NOT NULL,
    branch_id         TEXT    NOT NULL,
    participant_id    TEXT    NOT NULL,
    event_type        TEXT    NOT NULL,
    timestamp         TEXT    NOT NULL,
    log_partition     INTEGER NOT NULL,
    log_offset        INTEGER NOT NULL,
    transcript_tokens INTEGER NOT NULL,
    body              TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, session_id, seq)
);
CREATE UNIQUE INDEX events_by_id ON events (tenant_id, event_id);

CREATE TABLE messages (
    tenant_id      TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    branch_id      TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    message_id     TEXT    NOT NULL,
    role           TEXT    NOT NULL,
    participant_id TEXT    NOT NULL,
    text           TEXT    NOT NULL,
    tokens         INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, session_id, seq)
);

CREATE TABLE tool_calls (
    tenant_id        TEXT    NOT NULL,
    session_id       TEXT    NOT NULL,
    tool_call_id     TEXT    NOT NULL,
    branch_id        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    args             TEXT    NOT NULL,
    participant_id   TEXT    NOT NULL,
    request_event_id TEXT    NOT NULL,
    request_seq      INTEGER NOT NULL,
    message_id       TEXT,
    call_tokens      INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    result_event_id  TEXT,
    result_seq       INTEGER,
    output           TEXT,
    output_ref       TEXT,
    output_preview   TEXT,
    output_sha256    TEXT,
    output_bytes     INTEGER,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    preview_tokens   INTEGER NOT NULL DEFAULT 0,
    error            TEXT,
    retryable        INTEGER NOT NULL DEFAULT 0,
    privacy_class    TEXT,
    PRIMARY KEY (tenant_id, session_id, tool_call_id)
);
CREATE INDEX tool_calls_by_seq ON tool_calls (tenant_id, session_id, request_seq);

CREATE TABLE artifacts (
    tenant_id         TEXT    NOT NULL,
    artifact_id       TEXT    NOT NULL,
    session_id        TEXT    NOT NULL,
    uri               TEXT    NOT NULL,
    sha256            TEXT    NOT NULL,
    bytes             INTEGER NOT NULL,
    kind              TEXT    NOT NULL,
    source_event_id   TEXT    NOT NULL,
    privacy_class     TEXT,
    owner_participant TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, artifact_id, source_event_id)
);

-- Derived records: memories, compactions, context assemblies.
CREATE TABLE memories (
    tenant_id     TEXT    NOT NULL,
    memory_id     TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    branch_id     TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    record        TEXT    NOT NULL,
    superseded_by TEXT,
    PRIMARY KEY (tenant_id, memory_id)
);

CREATE TABLE compactions (
    tenant_id     TEXT    NOT NULL,
    compaction_id TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    branch_id     TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    record        TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, compaction_id)
);

CREATE TABLE assemblies (
    tenant_id   TEXT    NOT NULL,
    assembly_id TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    branch_id   TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    record      TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, assembly_id)
);

-- API keys, stored as SHA-256 of the key: a leaked database does not leak keys.
CREATE TABLE api_keys (
    key_sha256 TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    label      TEXT NOT NULL,
    created_at TEXT NOT NULL
);
