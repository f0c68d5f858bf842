-- Up Migration
-- What became of each request (GET /v1/outreach-requests/:requestId): the planner's decision, the
-- sends it planned, and their outcomes as the sender's SendRecorded events report them (the planner
-- never reads the sender's tables).

-- One row per requestId: accepted (the HTTP ingress's 202), planned or rejected (the consumer).
-- Transitions: domain/request-status.ts REQUEST_TRANSITIONS, applied as the upsert's condition.
CREATE TABLE requests (
  request_id text PRIMARY KEY,
  status text NOT NULL CHECK (status IN ('accepted', 'planned', 'rejected')),
  -- For rejected: the OutreachRejected reason code, its detail (field names only) and the send
  -- holding the step (step_already_*). Never a value from the request.
  reason text,
  detail text,
  send_id uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- The sends a plan may lead to, in sequence order (ord 0 is the requested step, then its follow-ups).
CREATE TABLE request_sends (
  request_id text NOT NULL,
  ord int NOT NULL,
  send_id uuid NOT NULL,
  campaign_id text NOT NULL,
  candidate_key text NOT NULL,
  step text NOT NULL,
  head_step text NOT NULL,
  planned_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (request_id, ord)
);

-- The latest outcome of each send (domain/request-status.ts `supersedes`), from SendRecorded.
-- request_id is the one the event names (null: a sender before SendRecorded v4).
CREATE TABLE send_outcomes (
  send_id uuid PRIMARY KEY,
  request_id text,
  outcome text NOT NULL CHECK (outcome IN ('sent', 'skipped_duplicate', 'suppressed', 'failed', 'ambiguous', 'held')),
  reason text,
  recorded_at timestamptz NOT NULL,
  event_id uuid NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Down Migration
DROP TABLE send_outcomes;
DROP TABLE request_sends;
DROP TABLE requests;
