-- Up Migration
-- Retention (ADR 014, "Retention you can set"): a closed conversation and its events are purged
-- CONVERSATION_RETENTION_DAYS after its last change. A closed conversation's `updated_at` is at or
-- after its close, so "closed, and unchanged for the retention" needs no close time of its own: the
-- purge walks this partial index in `updated_at` order and reads only what it deletes. (A close-time
-- column kept by a trigger ran a PL/pgSQL function on every insert and update of a conversation,
-- twice per send, to serve a purge that runs hourly.)
CREATE INDEX conversations_closed_idx ON conversations (updated_at) WHERE status = 'closed';

-- Down Migration
DROP INDEX conversations_closed_idx;
