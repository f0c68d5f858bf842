-- Up Migration
-- What operators did through the console: who, what, to what, why, and what the service answered.
-- Written after the service's answer, one row per action (refusals included); never updated.
CREATE TABLE audit (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  actor text NOT NULL,
  via text NOT NULL CHECK (via IN ('local', 'proxy')),
  action text NOT NULL,
  target text NOT NULL,
  reason text,
  outcome text NOT NULL CHECK (outcome IN ('done', 'refused', 'failed')),
  detail text
);
