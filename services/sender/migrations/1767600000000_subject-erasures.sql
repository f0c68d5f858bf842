-- Up Migration
-- Data-subject erasures (ADR 014).
-- An erased person's objection, kept as a keyed hash only: HMAC of the canonical address under the
-- suppression key (SUPPRESSION_KEY), never the address. The gate reads it next to `suppressions`.
CREATE TABLE suppression_hashes (
  address_hash text PRIMARY KEY CHECK (address_hash ~ '^[0-9a-f]{64}$'),
  reason text NOT NULL CHECK (reason IN ('unsubscribe', 'bounce', 'complaint', 'manual', 'erasure')),
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Each claim's own address hash under the suppression key (NULL: claimed before, or no key
-- configured): the gate's keyed lookup into suppression_hashes, by the claim's own hash.
ALTER TABLE sends ADD COLUMN address_hash text;

-- The hashes (under the suppression key) of what an erasure changed here: a second erasure answers
-- already_erased.
CREATE TABLE subject_erasures (
  subject_hash text PRIMARY KEY CHECK (subject_hash ~ '^[0-9a-f]{64}$'),
  erased_at timestamptz NOT NULL DEFAULT now()
);

-- An erasure (and an export) finds a person's rows by candidate key and by address: without these,
-- every request would scan the tables. Not on `sends`: an index there costs every send an entry at
-- its claim and at each status change; its unique keys lead with the campaign, and a walk of the
-- campaigns probes them instead (subjects-repository.ts).
CREATE INDEX skipped_sends_candidate_key_idx ON skipped_sends (candidate_key);
CREATE INDEX skipped_sends_duplicate_of_idx ON skipped_sends (duplicate_of);
CREATE INDEX provider_history_email_norm_idx ON provider_history (email_norm);
CREATE INDEX provider_history_candidate_key_idx ON provider_history (candidate_key) WHERE candidate_key IS NOT NULL;
CREATE INDEX feedback_events_email_hash_idx ON feedback_events (email_hash);
CREATE INDEX exposures_candidate_key_idx ON exposures (candidate_key);

-- Down Migration
DROP INDEX exposures_candidate_key_idx;
DROP INDEX feedback_events_email_hash_idx;
DROP INDEX provider_history_candidate_key_idx;
DROP INDEX provider_history_email_norm_idx;
DROP INDEX skipped_sends_duplicate_of_idx;
DROP INDEX skipped_sends_candidate_key_idx;
DROP TABLE subject_erasures;
ALTER TABLE sends DROP COLUMN address_hash;
DROP TABLE suppression_hashes;
