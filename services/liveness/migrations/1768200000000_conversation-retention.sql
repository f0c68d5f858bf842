-- Up Migration
-- Retention (ADR 014, "Retention you can set"): a closed conversation and its events are purged
-- CONVERSATION_RETENTION_DAYS after it closed. `closed_at` is when it closed, kept by a trigger on
-- every path that writes the status (the projection, the sweep, fresh inserts, seeds): set when the
-- row becomes closed, kept while it stays closed, cleared if it opens again. The purge walks the
-- partial index in close order, so it reads only what it deletes.
ALTER TABLE conversations ADD COLUMN closed_at timestamptz;
UPDATE conversations SET closed_at = updated_at WHERE status = 'closed';

CREATE FUNCTION conversations_closed_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status <> 'closed' THEN
    NEW.closed_at := NULL;
  ELSIF NEW.closed_at IS NULL THEN
    NEW.closed_at := now();
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER conversations_closed_at BEFORE INSERT OR UPDATE OF status ON conversations
  FOR EACH ROW EXECUTE FUNCTION conversations_closed_at();

CREATE INDEX conversations_closed_idx ON conversations (closed_at) WHERE closed_at IS NOT NULL;

-- Down Migration
DROP INDEX conversations_closed_idx;
DROP TRIGGER conversations_closed_at ON conversations;
DROP FUNCTION conversations_closed_at();
ALTER TABLE conversations DROP COLUMN closed_at;
