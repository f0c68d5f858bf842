-- Up Migration

-- Weights change during a test (a 10/90 ramp to 50/50), so the split the report expects depends on
-- when each candidate was assigned. Every set of weights an experiment has had is a period, written
-- in the transaction that changes the weights; `weights` is the variants in declared order
-- ([{"name", "weight"}]), NULL where they are not known.
CREATE TABLE weight_periods (
  experiment_id text NOT NULL REFERENCES experiments (experiment_id),
  period int NOT NULL CHECK (period >= 1),
  effective_from timestamptz NOT NULL DEFAULT now(),
  weights jsonb CHECK (weights IS NULL OR jsonb_typeof(weights) = 'array'),
  PRIMARY KEY (experiment_id, period)
);

-- Backfill. The weights before this table existed are not known, except that the current ones have
-- held since the last change of any kind (updated_at, which status changes move too): an
-- experiment changed since its creation gets an unknown period from created_at, which the report
-- lists and does not test.
INSERT INTO weight_periods (experiment_id, period, effective_from, weights)
SELECT experiment_id, 1, created_at, NULL FROM experiments WHERE updated_at > created_at;
INSERT INTO weight_periods (experiment_id, period, effective_from, weights)
SELECT e.experiment_id, CASE WHEN e.updated_at > e.created_at THEN 2 ELSE 1 END, e.updated_at,
       (SELECT jsonb_agg(jsonb_build_object('name', v.name, 'weight', v.weight) ORDER BY v.position, v.name)
        FROM variants v WHERE v.experiment_id = e.experiment_id)
FROM experiments e;

-- The period whose weights computed the assignment. NULL for rows written before this column (and
-- by a previous version during a rolling deploy): the report attributes those by assigned_at.
ALTER TABLE assignments ADD COLUMN period int;
ALTER TABLE assignments
  ADD CONSTRAINT assignments_period_fkey FOREIGN KEY (experiment_id, period) REFERENCES weight_periods (experiment_id, period);

-- Pre-platform variant history (cli/import-history.ts): one row per imported file, named by a
-- hash of its content, so importing the same file again finds its row and changes nothing.
CREATE TABLE exposure_imports (
  import_id uuid PRIMARY KEY,
  content_sha256 text NOT NULL UNIQUE,
  lines int NOT NULL,
  exposures int NOT NULL,
  new_exposures int NOT NULL,
  imported_at timestamptz NOT NULL DEFAULT now()
);

-- Imported exposures sit next to the ones from SendRecorded, so contamination (a candidate seen in
-- more than one arm) is found across both. They have no send; `origin` is the file's source column
-- (the system the history came from). The replay compares only `send` rows: imports are not in the log.
ALTER TABLE exposure_events ADD COLUMN source text NOT NULL DEFAULT 'send' CHECK (source IN ('send', 'import'));
ALTER TABLE exposure_events ADD COLUMN import_id uuid REFERENCES exposure_imports (import_id);
ALTER TABLE exposure_events ADD COLUMN origin text;
ALTER TABLE exposure_events ALTER COLUMN send_id DROP NOT NULL;
ALTER TABLE exposure_events
  ADD CONSTRAINT exposure_events_send_or_import CHECK (
    (source = 'send' AND send_id IS NOT NULL AND import_id IS NULL)
    OR (source = 'import' AND send_id IS NULL AND import_id IS NOT NULL)
  );

-- Down Migration
ALTER TABLE exposure_events DROP CONSTRAINT exposure_events_send_or_import;
DELETE FROM exposure_events WHERE source = 'import';
ALTER TABLE exposure_events ALTER COLUMN send_id SET NOT NULL;
ALTER TABLE exposure_events DROP COLUMN origin;
ALTER TABLE exposure_events DROP COLUMN import_id;
ALTER TABLE exposure_events DROP COLUMN source;
DROP TABLE exposure_imports;
ALTER TABLE assignments DROP CONSTRAINT assignments_period_fkey;
ALTER TABLE assignments DROP COLUMN period;
DROP TABLE weight_periods;
