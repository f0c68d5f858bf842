-- Up Migration
-- emailHash became a keyed hash (HMAC-SHA256 under a secret key, schemas/README.md "Keys"). Every
-- stored hash carries the id of the key it was made with, so an event re-emitted from a row says
-- which key made its hash; NULL marks rows from before keyed hashes (an unsalted SHA-256).
ALTER TABLE sends ADD COLUMN email_hash_key_id text;
ALTER TABLE skipped_sends ADD COLUMN email_hash_key_id text;
ALTER TABLE provider_history ADD COLUMN email_hash_key_id text;

-- Down Migration
ALTER TABLE provider_history DROP COLUMN email_hash_key_id;
ALTER TABLE skipped_sends DROP COLUMN email_hash_key_id;
ALTER TABLE sends DROP COLUMN email_hash_key_id;
