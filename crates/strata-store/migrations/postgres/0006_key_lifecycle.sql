-- Key lifecycle (issue 14): a key may expire and may be revoked; neither deletes the row, so a
-- revoked key is never registered again (a `strata dev` restart included).
ALTER TABLE api_keys ADD COLUMN expires_at TEXT;
ALTER TABLE api_keys ADD COLUMN revoked_at TEXT;
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id);
