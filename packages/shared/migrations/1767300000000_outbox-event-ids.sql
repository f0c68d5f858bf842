-- Up Migration
-- A published row leaves the outbox: the relay deletes it. Marking rows published in place rewrote
-- each whole row (its payload) and three index entries, once per event (docs/adr/013); a delete costs
-- a fraction of that. The outbox still refuses a repeat of an event it has had: enqueueEvents writes
-- each event id into outbox_event_ids (24 bytes) in the same statement, and only an id new there goes
-- into the outbox. The unique index decides, whatever either transaction's snapshot saw; the relay's
-- cleanup forgets ids older than its retention (a week by default).
CREATE TABLE outbox_event_ids (
  event_id uuid PRIMARY KEY,
  enqueued_at timestamptz NOT NULL DEFAULT now()
);
-- The retention delete's range: rows arrive in enqueued_at order, so a BRIN index is enough.
CREATE INDEX outbox_event_ids_at_brin ON outbox_event_ids USING brin (enqueued_at);

INSERT INTO outbox_event_ids (event_id, enqueued_at)
  SELECT event_id, created_at FROM outbox
  ON CONFLICT DO NOTHING;
DELETE FROM outbox WHERE published_at IS NOT NULL;
-- published_at stays, always NULL, until a later release drops it: a relay of the previous release,
-- still running during a rolling upgrade, marks rows published in place; this release's relay skips
-- them and its cleanup removes them. outbox_unpublished_idx stays too: the relay reads it in id
-- order, and the backlog gauges count through it, skipping the entries of deleted rows that vacuum
-- has not removed yet (a scan of the table would read every one of those).
DROP INDEX outbox_published_at_idx;

-- Down Migration
CREATE INDEX outbox_published_at_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
DROP TABLE outbox_event_ids;
