-- Up Migration
-- Data-subject erasures (ADR 014): the hashes (under the planner's suppression key, made by the
-- planner) of the people whose rows this service deleted, so a second erasure answers
-- already_erased. No address and no candidate key is kept here.
CREATE TABLE subject_erasures (
  subject_hash text PRIMARY KEY CHECK (subject_hash ~ '^[0-9a-f]{64}$'),
  erased_at timestamptz NOT NULL DEFAULT now()
);

-- Down Migration
DROP TABLE subject_erasures;
