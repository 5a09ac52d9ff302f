-- Strata projections (SPEC §5), PostgreSQL. The same tables as migrations/sqlite/0001_init.sql.
-- Every table is keyed by tenant first: no query crosses tenants.
--
-- JSON documents (folds, event bodies, records, tool specs) are TEXT, not JSONB: the store hands
-- back exactly the bytes it was given (canonical event JSON, key order included), and no query
-- looks inside them.

-- Consumer offsets of the projector, written in the same transaction as the rows they cover.
CREATE TABLE consumer_offsets (
    group_id    TEXT   NOT NULL,
    partition   BIGINT NOT NULL,
    next_offset BIGINT NOT NULL,
    PRIMARY KEY (group_id, partition)
);

-- The fold state of each session (branches, agent state, open tool calls, counters) as JSON.
CREATE TABLE session_folds (
    tenant_id   TEXT   NOT NULL,
    session_id  TEXT   NOT NULL,
    head_seq    BIGINT NOT NULL,
    event_count BIGINT NOT NULL,
    fold        TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);

CREATE TABLE sessions (
    tenant_id              TEXT   NOT NULL,
    session_id             TEXT   NOT NULL,
    started_event_id       TEXT   NOT NULL,
    provider               TEXT   NOT NULL,
    model                  TEXT   NOT NULL,
    context_window_tokens  BIGINT NOT NULL,
    reserved_output_tokens BIGINT NOT NULL,
    system_prompt          TEXT,
    system_prompt_tokens   BIGINT NOT NULL,
    tools                  TEXT   NOT NULL,
    tools_tokens           BIGINT NOT NULL,
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

-- Every accepted event, canonical JSON included (export, audit, rebuild checks). `timestamp` is
-- the event's own RFC 3339 text, kept as written.
CREATE TABLE events (
    tenant_id         TEXT   NOT NULL,
    session_id        TEXT   NOT NULL,
    seq               BIGINT NOT NULL,
    event_id          TEXT   NOT NULL,
    branch_id         TEXT   NOT NULL,
    participant_id    TEXT   NOT NULL,
    event_type        TEXT   NOT NULL,
    timestamp         TEXT   NOT NULL,
    log_partition     BIGINT NOT NULL,
    log_offset        BIGINT NOT NULL,
    transcript_tokens BIGINT NOT NULL,
    body              TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, session_id, seq)
);
CREATE UNIQUE INDEX events_by_id ON events (tenant_id, event_id);

-- The assembler reads the newest messages of a branch lineage: the primary key
-- (tenant_id, session_id, seq) is the index it walks.
CREATE TABLE messages (
    tenant_id      TEXT   NOT NULL,
    session_id     TEXT   NOT NULL,
    seq            BIGINT NOT NULL,
    branch_id      TEXT   NOT NULL,
    event_id       TEXT   NOT NULL,
    message_id     TEXT   NOT NULL,
    role           TEXT   NOT NULL,
    participant_id TEXT   NOT NULL,
    text           TEXT   NOT NULL,
    tokens         BIGINT NOT NULL,
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
    request_seq      BIGINT  NOT NULL,
    message_id       TEXT,
    call_tokens      BIGINT  NOT NULL,
    status           TEXT    NOT NULL,
    result_event_id  TEXT,
    result_seq       BIGINT,
    output           TEXT,
    output_ref       TEXT,
    output_preview   TEXT,
    output_sha256    TEXT,
    output_bytes     BIGINT,
    output_tokens    BIGINT  NOT NULL DEFAULT 0,
    preview_tokens   BIGINT  NOT NULL DEFAULT 0,
    error            TEXT,
    retryable        BOOLEAN NOT NULL DEFAULT FALSE,
    privacy_class    TEXT,
    -- Insertion order, as SQLite's rowid: the calls of one response share a request_seq and
    -- are read back in the order the model asked for them. Not content (left out of
    -- fingerprints).
    call_order       BIGINT  GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (tenant_id, session_id, tool_call_id)
);
-- The assembler reads the tool calls of its message window by request seq.
CREATE INDEX tool_calls_by_seq ON tool_calls (tenant_id, session_id, request_seq, call_order);

CREATE TABLE artifacts (
    tenant_id         TEXT   NOT NULL,
    artifact_id       TEXT   NOT NULL,
    session_id        TEXT   NOT NULL,
    uri               TEXT   NOT NULL,
    sha256            TEXT   NOT NULL,
    bytes             BIGINT NOT NULL,
    kind              TEXT   NOT NULL,
    source_event_id   TEXT   NOT NULL,
    privacy_class     TEXT,
    owner_participant TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, artifact_id, source_event_id)
);

-- Derived records: memories, compactions, context assemblies.
CREATE TABLE memories (
    tenant_id     TEXT   NOT NULL,
    memory_id     TEXT   NOT NULL,
    session_id    TEXT   NOT NULL,
    branch_id     TEXT   NOT NULL,
    event_id      TEXT   NOT NULL,
    seq           BIGINT NOT NULL,
    record        TEXT   NOT NULL,
    superseded_by TEXT,
    PRIMARY KEY (tenant_id, memory_id)
);

CREATE TABLE compactions (
    tenant_id     TEXT   NOT NULL,
    compaction_id TEXT   NOT NULL,
    session_id    TEXT   NOT NULL,
    branch_id     TEXT   NOT NULL,
    event_id      TEXT   NOT NULL,
    seq           BIGINT NOT NULL,
    record        TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, compaction_id)
);

CREATE TABLE assemblies (
    tenant_id   TEXT   NOT NULL,
    assembly_id TEXT   NOT NULL,
    session_id  TEXT   NOT NULL,
    branch_id   TEXT   NOT NULL,
    event_id    TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    record      TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, assembly_id)
);

-- API keys, stored as SHA-256 of the key: a leaked database does not leak keys.
CREATE TABLE api_keys (
    key_sha256 TEXT        NOT NULL PRIMARY KEY,
    tenant_id  TEXT        NOT NULL,
    label      TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
