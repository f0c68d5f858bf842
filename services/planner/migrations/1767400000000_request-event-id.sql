-- Up Migration
-- The event each request's record was decided on (domain/request-status.ts SAME_EVENT_ONLY,
-- refusalTold): a refusal of another event that reuses the requestId does not move the record or
-- publish an OutreachRejected. NULL: a record from before, or a refusal over HTTP (no event).
ALTER TABLE requests ADD COLUMN event_id text;

-- Down Migration
ALTER TABLE requests DROP COLUMN event_id;
