-- Up Migration
-- Data-subject requests (ADR 014).
-- The audit of every export and erasure: who (a keyed hash of the caller's token, stable across
-- restarts), what, when, which stores answered and how, and the subject as a keyed hash under the
-- suppression key (never the address, never the candidate id).
CREATE TABLE subject_requests (
  id uuid PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('export', 'erase')),
  by_address boolean NOT NULL,
  actor text NOT NULL,
  subject_hash text NOT NULL CHECK (subject_hash ~ '^[0-9a-f]{64}$'),
  stores jsonb NOT NULL,
  requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subject_requests_subject_idx ON subject_requests (subject_hash);

-- What an erasure changed here, as hashes (a second erasure answers already_erased).
CREATE TABLE subject_erasures (
  subject_hash text PRIMARY KEY CHECK (subject_hash ~ '^[0-9a-f]{64}$'),
  erased_at timestamptz NOT NULL DEFAULT now()
);

-- A person's rows by candidate key and by address (the unique keys lead with the campaign).
CREATE INDEX scheduled_steps_candidate_idx ON scheduled_steps (candidate_key);
CREATE INDEX scheduled_steps_email_idx ON scheduled_steps ((send ->> 'emailNorm'));
CREATE INDEX sequences_candidate_idx ON sequences (candidate_key);
CREATE INDEX sequences_email_idx ON sequences ((template ->> 'emailNorm'));
CREATE INDEX request_sends_candidate_idx ON request_sends (candidate_key);

-- Down Migration
DROP INDEX request_sends_candidate_idx;
DROP INDEX sequences_email_idx;
DROP INDEX sequences_candidate_idx;
DROP INDEX scheduled_steps_email_idx;
DROP INDEX scheduled_steps_candidate_idx;
DROP TABLE subject_erasures;
DROP TABLE subject_requests;
