-- Up Migration
-- A published row leaves the outbox: the relay deletes it and keeps only its event id, with when it
-- was published, in outbox_published. Marking rows published in place rewrote each whole row (its
-- payload) and three index entries, once per event (docs/design.md, "Cost"); a delete and a 24-byte
-- row cost a fraction of that. outbox_published still refuses a repeat of an event already published
-- (enqueueEvents checks it), for as long as the relay's retention keeps it (a week by default).
CREATE TABLE outbox_published (
  event_id uuid PRIMARY KEY,
  published_at timestamptz NOT NULL DEFAULT now()
);
-- The retention delete's range: rows arrive in published_at order, so a BRIN index is enough.
CREATE INDEX outbox_published_at_brin ON outbox_published USING brin (published_at);

INSERT INTO outbox_published (event_id, published_at)
  SELECT event_id, published_at FROM outbox WHERE published_at IS NOT NULL
  ON CONFLICT DO NOTHING;
DELETE FROM outbox WHERE published_at IS NOT NULL;
-- published_at stays, always NULL, until a later release drops it: a relay of the previous release,
-- still running during a rolling upgrade, marks rows published in place; this release's relay skips
-- them and its cleanup moves them out. outbox_unpublished_idx stays too: the relay reads it in id
-- order, and the backlog gauges count through it, skipping the entries of deleted rows that vacuum
-- has not removed yet (a scan of the table would read every one of those).
DROP INDEX outbox_published_at_idx;

-- Down Migration
CREATE INDEX outbox_published_at_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
DROP TABLE outbox_published;
