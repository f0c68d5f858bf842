-- Up Migration
-- Steps planned for later, one row per (campaign, candidate, step). A reschedule is an UPDATE of
-- this row, never an insert a dedupe key could swallow (seed 003).
CREATE TABLE scheduled_steps (
  campaign_id text NOT NULL,
  candidate_key text NOT NULL,
  step text NOT NULL,
  conversation_id text NOT NULL,
  send_id uuid NOT NULL,
  send jsonb NOT NULL,
  due_at timestamptz NOT NULL,
  status text NOT NULL CHECK (status IN ('scheduled', 'emitted', 'cancelled')),
  reason text,
  reschedules int NOT NULL DEFAULT 0,
  emitted_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (campaign_id, candidate_key, step)
);
CREATE INDEX scheduled_steps_due_idx ON scheduled_steps (due_at) WHERE status = 'scheduled';
CREATE INDEX scheduled_steps_conversation_idx ON scheduled_steps (conversation_id) WHERE status = 'scheduled';

-- Reminder sequences: the next follow-up is scheduled when the previous step's send is recorded.
CREATE TABLE sequences (
  campaign_id text NOT NULL,
  candidate_key text NOT NULL,
  head_step text NOT NULL,
  conversation_id text NOT NULL,
  -- The head send (address, candidate, experiment) the follow-ups are made from.
  template jsonb NOT NULL,
  follow_ups jsonb NOT NULL,
  previous_step text NOT NULL,
  next_index int NOT NULL DEFAULT 0,
  status text NOT NULL CHECK (status IN ('active', 'stopped', 'finished')),
  stop_reason text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (campaign_id, candidate_key, head_step)
);
CREATE INDEX sequences_previous_step_idx ON sequences (campaign_id, candidate_key, previous_step) WHERE status = 'active';
CREATE INDEX sequences_conversation_idx ON sequences (conversation_id) WHERE status = 'active';

-- Down Migration
DROP TABLE sequences;
DROP TABLE scheduled_steps;
