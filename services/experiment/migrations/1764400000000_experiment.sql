-- Up Migration
CREATE TABLE experiments (
  experiment_id text PRIMARY KEY,
  salt text NOT NULL,
  status text NOT NULL CHECK (status IN ('active', 'paused', 'stopped')),
  exclusion_group text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE variants (
  experiment_id text NOT NULL REFERENCES experiments (experiment_id),
  name text NOT NULL,
  weight int NOT NULL CHECK (weight >= 0),
  position int NOT NULL,
  PRIMARY KEY (experiment_id, name)
);

-- Sticky assignments: one variant per candidate per experiment, forever.
CREATE TABLE assignments (
  experiment_id text NOT NULL REFERENCES experiments (experiment_id),
  candidate_key text NOT NULL,
  variant text NOT NULL,
  bucket double precision NOT NULL,
  assigned_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (experiment_id, candidate_key)
);

-- A candidate belongs to at most one experiment of an exclusion group.
CREATE TABLE group_memberships (
  exclusion_group text NOT NULL,
  candidate_key text NOT NULL,
  experiment_id text NOT NULL,
  joined_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (exclusion_group, candidate_key)
);

-- Exposures: every SendRecorded(sent) of an experiment's send, once per event.
CREATE TABLE exposure_events (
  event_id uuid PRIMARY KEY,
  experiment_id text NOT NULL,
  candidate_key text NOT NULL,
  variant text NOT NULL,
  send_id uuid NOT NULL,
  recorded_at timestamptz NOT NULL
);
CREATE INDEX exposure_events_candidate_idx ON exposure_events (experiment_id, candidate_key);

CREATE TABLE contaminations (
  experiment_id text NOT NULL,
  candidate_key text NOT NULL,
  assigned_variant text,
  exposed_variants text[] NOT NULL,
  detected_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (experiment_id, candidate_key)
);

-- Down Migration
DROP TABLE contaminations;
DROP TABLE exposure_events;
DROP TABLE group_memberships;
DROP TABLE assignments;
DROP TABLE variants;
DROP TABLE experiments;
