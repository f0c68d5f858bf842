-- Up Migration
-- Delivery evidence (issue #32, ADR 009): a provider's or relay's own report that a message went out
-- settles an in-doubt send `sent`. Reports come from Mailgun too now; `accepted` is a provider or relay
-- taking the message for delivery (SendGrid `processed`, Mailgun `accepted`, a DSN's `relayed`);
-- `evidence` is the decision for a report that named a send and said it went out; the provider's id
-- of the message rides along to the SendRecorded it settles.
ALTER TABLE feedback_events
  DROP CONSTRAINT feedback_events_source_check,
  ADD CONSTRAINT feedback_events_source_check CHECK (source IN ('ses', 'sendgrid', 'mailgun', 'dsn', 'smtp')),
  DROP CONSTRAINT feedback_events_kind_check,
  ADD CONSTRAINT feedback_events_kind_check
    CHECK (kind IN ('hard_bounce', 'soft_bounce', 'complaint', 'delivered', 'accepted', 'other')),
  DROP CONSTRAINT feedback_events_decision_check,
  ADD CONSTRAINT feedback_events_decision_check CHECK (decision IN ('suppress', 'count', 'record', 'evidence', 'ignore')),
  ADD COLUMN provider_message_id text CHECK (length(provider_message_id) BETWEEN 1 AND 256);

-- The retention purge deletes by age (FEEDBACK_RETENTION_DAYS).
CREATE INDEX feedback_events_received_idx ON feedback_events (received_at);
CREATE INDEX soft_bounced_sends_counted_idx ON soft_bounced_sends (counted_at);

-- Whether the send's last attempt may have handed the message over (it became ambiguous): only then
-- does evidence settle a retry waiting for its fence. An attempt the server certainly refused before
-- the body (retried as not sent) leaves it false, so its leaked ENVID cannot be used to forge a
-- "sent" for a message that never went out. Set false at each fence.
ALTER TABLE sends ADD COLUMN last_attempt_in_doubt boolean NOT NULL DEFAULT false;

-- Down Migration
ALTER TABLE sends DROP COLUMN last_attempt_in_doubt;
DROP INDEX soft_bounced_sends_counted_idx;
DROP INDEX feedback_events_received_idx;
ALTER TABLE feedback_events
  DROP COLUMN provider_message_id,
  DROP CONSTRAINT feedback_events_decision_check,
  ADD CONSTRAINT feedback_events_decision_check CHECK (decision IN ('suppress', 'count', 'record', 'ignore')),
  DROP CONSTRAINT feedback_events_kind_check,
  ADD CONSTRAINT feedback_events_kind_check
    CHECK (kind IN ('hard_bounce', 'soft_bounce', 'complaint', 'delivered', 'other')),
  DROP CONSTRAINT feedback_events_source_check,
  ADD CONSTRAINT feedback_events_source_check CHECK (source IN ('ses', 'sendgrid', 'dsn', 'smtp'));
