-- Up Migration
-- Unsubscribes, bounces and complaints taken in (issue #18).

-- Where each suppression came from. Rows from before, and a previous release's pods during a rollout,
-- write through the operator API only: hence the default.
ALTER TABLE suppressions
  ADD COLUMN source text NOT NULL DEFAULT 'api'
    CHECK (source IN ('unsubscribe', 'ses', 'sendgrid', 'dsn', 'smtp', 'api')),
  ADD COLUMN send_id uuid,
  ADD COLUMN campaign_id text;

-- Every feedback report taken in, once: a provider's retry of the same report (same source, event id
-- and recipient) finds its row and does nothing again. Also the audit trail of what each report made
-- the sender do. No address and no free text: the recipient is its keyed hash, the rest are tokens the
-- parsers checked (domain/feedback).
CREATE TABLE feedback_events (
  source text NOT NULL CHECK (source IN ('ses', 'sendgrid', 'dsn', 'smtp')),
  event_id text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 256),
  email_hash text NOT NULL,
  email_hash_key_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('hard_bounce', 'soft_bounce', 'complaint', 'delivered', 'other')),
  decision text NOT NULL CHECK (decision IN ('suppress', 'count', 'record', 'ignore')),
  send_id uuid,
  campaign_id text,
  diagnostic text CHECK (diagnostic ~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'),
  subtype text CHECK (length(subtype) <= 128),
  occurred_at timestamptz NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (source, event_id, email_hash)
);
CREATE INDEX feedback_events_send_idx ON feedback_events (send_id) WHERE send_id IS NOT NULL;

-- Sends whose soft bounce already counted toward their campaign's auto-pause: a message reported as
-- delayed three times, then bounced, is one failure, not four.
CREATE TABLE soft_bounced_sends (
  send_id uuid PRIMARY KEY,
  campaign_id text NOT NULL,
  counted_at timestamptz NOT NULL DEFAULT now()
);

-- Down Migration
DROP TABLE soft_bounced_sends;
DROP TABLE feedback_events;
ALTER TABLE suppressions DROP COLUMN campaign_id, DROP COLUMN send_id, DROP COLUMN source;
