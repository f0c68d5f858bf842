-- Up Migration

-- An assignment seeded from imported pre-platform history (cli/import-history.ts): the arm the
-- candidate saw first, stored as its sticky assignment so the platform goes on sending it. Its
-- `assigned_at` is when history says the candidate saw the arm, `period` is NULL (no weights drew
-- it), and `import_id` names the import; the report keeps these out of the sample-ratio test.
ALTER TABLE assignments ADD COLUMN import_id uuid REFERENCES exposure_imports (import_id);

-- Down Migration
ALTER TABLE assignments DROP COLUMN import_id;
