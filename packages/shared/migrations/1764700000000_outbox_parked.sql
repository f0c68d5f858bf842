-- Up Migration
-- Outbox rows the relay cannot publish because a single record is larger than its topic's
-- max.message.bytes. The relay moves them here and goes on with the rest; an operator decides
-- (docs/operations.md, "Parked outbox records"): raise the topic's limit and move the row back to
-- the outbox, or drop it. The event id stays unique, so a handler that enqueues the same event
-- again after a redelivery does not park it twice.
CREATE TABLE outbox_parked (
  id bigserial PRIMARY KEY,
  outbox_id bigint NOT NULL,
  event_id uuid NOT NULL UNIQUE,
  topic text NOT NULL,
  key text,
  headers jsonb NOT NULL,
  payload bytea NOT NULL,
  size_bytes integer NOT NULL,
  limit_bytes integer NOT NULL,
  reason text NOT NULL,
  created_at timestamptz NOT NULL,
  parked_at timestamptz NOT NULL DEFAULT now()
);

-- Down Migration
DROP TABLE outbox_parked;
