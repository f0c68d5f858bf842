-- Up Migration
-- The delivery lookup (ADR 009) and a backfill that survives real use (issue #18).

-- When the current provider call started (the fence, claimed → sending): a lookup's "not found" only
-- licenses a retry once the hand-over bound and the settle time have passed since then. updated_at
-- moves on later writes, so it would only ever err late; rows fenced before this column take it.
ALTER TABLE sends ADD COLUMN attempt_started_at timestamptz;
UPDATE sends SET attempt_started_at = updated_at WHERE status IN ('sending', 'ambiguous');
-- The reconciler's lookup sweep of ambiguous sends, oldest attempt first, within the give-up bound.
CREATE INDEX sends_lookup_idx ON sends (attempt_started_at) WHERE status = 'ambiguous';

-- One row per imported provider history, named by a hash of the file's bytes: importing the same
-- file again finds its row and changes nothing. The options that decide how the rows were read are
-- kept, so the same file with other options is refused rather than imported twice.
CREATE TABLE provider_imports (
  import_id uuid PRIMARY KEY,
  content_sha256 text NOT NULL UNIQUE,
  step text,
  campaign_id text,
  allow_new_steps boolean NOT NULL,
  lines int NOT NULL,
  rows_imported int NOT NULL,
  new_sends int NOT NULL,
  matched_live int NOT NULL,
  resolved_ambiguous int NOT NULL,
  history_from timestamptz,
  history_to timestamptz,
  imported_at timestamptz NOT NULL DEFAULT now()
);

-- The live send a history row is (its Message-ID is `<sendId@MESSAGE_ID_DOMAIN>`): the same
-- delivery, which the duplicates report counts once.
ALTER TABLE provider_history ADD COLUMN send_id uuid;
CREATE INDEX provider_history_send_idx ON provider_history (send_id) WHERE send_id IS NOT NULL;

-- Down Migration
DROP INDEX provider_history_send_idx;
ALTER TABLE provider_history DROP COLUMN send_id;
DROP TABLE provider_imports;
DROP INDEX sends_lookup_idx;
ALTER TABLE sends DROP COLUMN attempt_started_at;
