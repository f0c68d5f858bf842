-- Up Migration
-- Replies (MessageReceived on conversation.events.v1), once per event: the reply rate per variant
-- (ADR 015). A reply is attributed at report time to the experiments whose message the candidate was
-- sent in the same campaign before replying, so the two topics may arrive in any order and a replay
-- reaches the same counts. An exposure recorded before this migration has no campaign: it matches
-- a reply of its candidate in any campaign.
ALTER TABLE exposure_events ADD COLUMN campaign_id text;

CREATE TABLE reply_events (
  event_id uuid PRIMARY KEY,
  candidate_key text NOT NULL,
  campaign_id text NOT NULL,
  conversation_id text NOT NULL,
  occurred_at timestamptz NOT NULL
);
CREATE INDEX reply_events_candidate_idx ON reply_events (candidate_key, campaign_id, occurred_at);

-- Down Migration
DROP TABLE reply_events;
ALTER TABLE exposure_events DROP COLUMN campaign_id;
