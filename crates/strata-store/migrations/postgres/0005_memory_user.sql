-- User-scoped memory belongs to one end user (issue 14): the column the snapshot filters on.
ALTER TABLE memories ADD COLUMN user_id TEXT
    GENERATED ALWAYS AS ((record::jsonb) ->> 'user_id') STORED;
CREATE INDEX memories_by_user ON memories (tenant_id, scope, user_id);
