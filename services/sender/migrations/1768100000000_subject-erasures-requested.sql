-- Up Migration
-- Every erasure asked of this service is recorded (ADR 014, "Rebuilds do not resurrect"): the
-- rebuild filter must know a person this store held nothing of yet (a projection behind the log).
-- `erased_rows` says whether an erasure changed rows here: a second erasure answers already_erased
-- by it, and an unknown person stays not_found.
ALTER TABLE subject_erasures ADD COLUMN erased_rows boolean NOT NULL DEFAULT true;

-- Down Migration
DELETE FROM subject_erasures WHERE NOT erased_rows;
ALTER TABLE subject_erasures DROP COLUMN erased_rows;
