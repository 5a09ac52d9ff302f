-- Memory selection by recency (issue 13): the snapshot loads a session's newest memories and the
-- newest shared ones (user, global, project) by when they were observed.
ALTER TABLE memories ADD COLUMN observed_at TEXT
    GENERATED ALWAYS AS (json_extract(record, '$.observed_at')) VIRTUAL;
CREATE INDEX memories_shared_by_time ON memories (tenant_id, scope, observed_at);
