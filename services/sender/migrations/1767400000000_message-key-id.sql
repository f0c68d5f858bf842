-- Up Migration
-- The identifier key each send's last attempt signed its Message-ID and ENVID with (ADR 012), so the
-- delivery lookup and a retry after a key rotation compute the Message-ID that went out. NULL: never
-- attempted, or attempted before identifiers were signed (the Message-ID was `<sendId@domain>`).
ALTER TABLE sends
  ADD COLUMN message_key_id text CHECK (message_key_id ~ '^[a-z0-9][a-z0-9-]{0,15}$');

-- Down Migration
ALTER TABLE sends DROP COLUMN message_key_id;
