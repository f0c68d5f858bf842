-- Up Migration
-- Request statuses are kept REQUEST_STATUS_RETENTION_DAYS (30 by default), then purged by the
-- planner (adapters/requests-repository.ts purgeOlderThan). These indexes serve the purge: the age of
-- a record and of an outcome, and whether a kept request still lists an outcome.
CREATE INDEX requests_updated_at ON requests (updated_at);
CREATE INDEX send_outcomes_updated_at ON send_outcomes (updated_at);
CREATE INDEX request_sends_send_id ON request_sends (send_id);

-- Down Migration
DROP INDEX request_sends_send_id;
DROP INDEX send_outcomes_updated_at;
DROP INDEX requests_updated_at;
