-- Up Migration
-- Conversations end (issue #18): after the last planned step, the candidate's reply is awaited
-- until the reply window closes; then the sweep closes the conversation (`sequence_completed`).
ALTER TABLE conversations
  ADD COLUMN awaiting_reply_since timestamptz,
  ADD COLUMN reply_deadline timestamptz,
  ADD COLUMN closed_reason text;

-- Null: the service's REPLY_WINDOW_MS applies (campaigns configured before the window existed).
ALTER TABLE campaign_graces ADD COLUMN reply_window_ms bigint CHECK (reply_window_ms > 0);

-- Which conversation planned each (campaign, candidate, step): a send that names no conversation
-- (SendRecorded before it carried one) belongs to the earliest plan listing its step, by log order.
CREATE TABLE planned_steps (
  campaign_id text NOT NULL,
  candidate_key text NOT NULL,
  step text NOT NULL,
  conversation_id text NOT NULL,
  planned_at timestamptz NOT NULL,
  source_topic text NOT NULL,
  source_partition int NOT NULL,
  source_offset bigint NOT NULL,
  event_id uuid NOT NULL,
  PRIMARY KEY (campaign_id, candidate_key, step)
);

-- A send filed by its step (it named no conversation) keeps the key it was filed by, so a plan
-- that arrives after it (a replay reading the two topics at different speeds) can move it.
ALTER TABLE conversation_events
  ADD COLUMN route_campaign_id text,
  ADD COLUMN route_candidate_key text,
  ADD COLUMN route_step text;
CREATE INDEX conversation_events_route_idx ON conversation_events (route_campaign_id, route_candidate_key, route_step)
  WHERE route_step IS NOT NULL;

-- Down Migration
DROP INDEX conversation_events_route_idx;
ALTER TABLE conversation_events DROP COLUMN route_step, DROP COLUMN route_candidate_key, DROP COLUMN route_campaign_id;
DROP TABLE planned_steps;
ALTER TABLE campaign_graces DROP COLUMN reply_window_ms;
ALTER TABLE conversations DROP COLUMN closed_reason, DROP COLUMN reply_deadline, DROP COLUMN awaiting_reply_since;
