-- Up Migration
-- Every event of every conversation (idempotent by event id): the timeline, and the input the
-- state is re-folded from, so out-of-order arrivals give the ordered result.
CREATE TABLE conversation_events (
  event_id uuid PRIMARY KEY,
  conversation_id text NOT NULL,
  event_type text NOT NULL,
  event_time timestamptz NOT NULL,
  -- Log position: orders events that share an append time (one producer batch).
  source_topic text NOT NULL,
  source_partition int NOT NULL,
  source_offset bigint NOT NULL,
  payload jsonb NOT NULL,
  projected_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversation_events_conversation_idx ON conversation_events (conversation_id, event_time);

CREATE TABLE conversations (
  conversation_id text PRIMARY KEY,
  campaign_id text NOT NULL,
  candidate_key text NOT NULL,
  status text NOT NULL CHECK (status IN ('open', 'closed')),
  obligation_since timestamptz,
  obligation_kind text CHECK (obligation_kind IN ('inbound', 'outbound')),
  pending_step_id text,
  due_at timestamptz,
  last_event_at timestamptz,
  last_event_type text,
  -- When each rule would flag it, and the earlier of the two: what the sweep scans.
  obligation_deadline timestamptz,
  overdue_deadline timestamptz,
  stall_deadline timestamptz,
  stalled_reason text CHECK (stalled_reason IN ('no_next_step', 'next_step_overdue')),
  stalled_since timestamptz,
  flagged_at timestamptz,
  stall_count int NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversations_sweep_idx ON conversations (stall_deadline) WHERE stalled_reason IS NULL AND status = 'open';
CREATE INDEX conversations_stalled_idx ON conversations (flagged_at, conversation_id) WHERE stalled_reason IS NOT NULL;
CREATE INDEX conversations_obligation_idx ON conversations (obligation_since) WHERE status = 'open';

-- Per-campaign grace periods; the service's defaults apply where a campaign has none.
CREATE TABLE campaign_graces (
  campaign_id text PRIMARY KEY,
  inbound_ms bigint NOT NULL CHECK (inbound_ms > 0),
  outbound_ms bigint NOT NULL CHECK (outbound_ms > 0),
  overdue_ms bigint NOT NULL CHECK (overdue_ms >= 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Down Migration
DROP TABLE campaign_graces;
DROP TABLE conversations;
DROP TABLE conversation_events;
