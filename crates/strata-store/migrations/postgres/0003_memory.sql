-- Governed memory (issue 4): the columns retrieval filters on, derived from the record the
-- projector writes (so the projector's inserts stay as they are and a replay fills them).
ALTER TABLE memories ADD COLUMN scope TEXT
    GENERATED ALWAYS AS ((record::jsonb) ->> 'scope') STORED;
ALTER TABLE memories ADD COLUMN project_id TEXT
    GENERATED ALWAYS AS ((record::jsonb) ->> 'project_id') STORED;
CREATE INDEX memories_by_session ON memories (tenant_id, session_id, seq);
CREATE INDEX memories_by_project ON memories (tenant_id, project_id, scope);
CREATE INDEX compactions_by_branch ON compactions (tenant_id, session_id, branch_id, seq);
