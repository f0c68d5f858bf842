-- Up Migration
-- The sender's state: one row per send, guarded by the two uniqueness rules that make a second
-- email for the same (campaign, candidate, step) or (campaign, address, step) impossible.

CREATE TABLE campaigns (
  campaign_id text PRIMARY KEY,
  paused boolean NOT NULL DEFAULT false,
  paused_reason text,
  paused_at timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sends (
  send_id uuid PRIMARY KEY,
  campaign_id text NOT NULL,
  candidate_id text NOT NULL,
  candidate_key text NOT NULL,
  email text NOT NULL,
  email_norm text NOT NULL,
  email_hash text NOT NULL,
  step text NOT NULL,
  experiment_id text,
  variant text,
  subject text NOT NULL,
  body text NOT NULL,
  request_id text NOT NULL,
  request_event_id uuid,
  correlation_id text NOT NULL,
  source text NOT NULL DEFAULT 'live' CHECK (source IN ('live', 'backfill')),
  status text NOT NULL CHECK (status IN ('claimed', 'sending', 'sent', 'suppressed', 'failed', 'ambiguous', 'held')),
  claim_token uuid,
  lease_expires_at timestamptz,
  attempts int NOT NULL DEFAULT 0,
  reason text,
  provider_message_id text,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  sent_at timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT sends_one_per_candidate_step UNIQUE (campaign_id, candidate_key, step),
  CONSTRAINT sends_one_per_address_step UNIQUE (campaign_id, email_norm, step)
);
-- The reconciler's sweep: expired leases of unfinished sends.
CREATE INDEX sends_expired_leases_idx ON sends (lease_expires_at) WHERE status IN ('claimed', 'sending');
CREATE INDEX sends_held_idx ON sends (campaign_id) WHERE status = 'held';
CREATE INDEX sends_status_idx ON sends (campaign_id, status);

-- Requests that lost the uniqueness race to another send: their outcome is skipped_duplicate.
CREATE TABLE skipped_sends (
  send_id uuid PRIMARY KEY,
  duplicate_of uuid NOT NULL REFERENCES sends (send_id),
  campaign_id text NOT NULL,
  candidate_key text NOT NULL,
  email_hash text NOT NULL,
  step text NOT NULL,
  reason text NOT NULL,
  request_id text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Unsubscribes, bounces and manual blocks, by normalized address; checked before every send.
CREATE TABLE suppressions (
  email_norm text PRIMARY KEY,
  reason text NOT NULL CHECK (reason IN ('unsubscribe', 'bounce', 'complaint', 'manual')),
  note text,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- First variant each candidate was sent per experiment: a send of another variant is blocked.
CREATE TABLE exposures (
  experiment_id text NOT NULL,
  candidate_key text NOT NULL,
  variant text NOT NULL,
  send_id uuid NOT NULL,
  exposed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (experiment_id, candidate_key)
);

-- Every row of an imported provider history, duplicates included (seed step 2).
CREATE TABLE provider_history (
  id bigserial PRIMARY KEY,
  import_id uuid NOT NULL,
  line int NOT NULL,
  campaign_id text NOT NULL,
  email_norm text NOT NULL,
  email_hash text NOT NULL,
  step text NOT NULL,
  candidate_key text,
  provider_message_id text,
  sent_at timestamptz NOT NULL,
  imported_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (import_id, line)
);
CREATE INDEX provider_history_key_idx ON provider_history (campaign_id, step, email_norm);

-- Down Migration
DROP TABLE provider_history;
DROP TABLE exposures;
DROP TABLE suppressions;
DROP TABLE skipped_sends;
DROP TABLE sends;
DROP TABLE campaigns;
