-- Up Migration
-- The transactional outbox (packages/shared/src/outbox): a service writes its events here in the
-- same transaction as its state; the relay publishes them to Kafka in id order.
CREATE TABLE outbox (
  id bigserial PRIMARY KEY,
  event_id uuid NOT NULL UNIQUE,
  topic text NOT NULL,
  key text,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  payload bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  published_at timestamptz
);
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Down Migration
DROP TABLE outbox;
