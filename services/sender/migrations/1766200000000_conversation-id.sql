-- Up Migration
-- The conversation a request named (SendRequested v2), carried to every SendRecorded (v3) so that
-- liveness files the send under it. NULL for rows from before, for backfilled history, and when a
-- request named none (liveness then files the send by its planned step).
ALTER TABLE sends ADD COLUMN conversation_id text;
ALTER TABLE skipped_sends ADD COLUMN conversation_id text;

-- Down Migration
ALTER TABLE skipped_sends DROP COLUMN conversation_id;
ALTER TABLE sends DROP COLUMN conversation_id;
