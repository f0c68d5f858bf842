-- Up Migration
-- Controls a team reaches for in an incident, shared by every replica through this database rather
-- than held in one pod's memory (issue #18).

-- The global kill switch: one row. While `paused`, no replica fences a send; claims become `held`
-- exactly like a paused campaign's, and resuming releases each held send once.
CREATE TABLE sending_control (
  id boolean PRIMARY KEY DEFAULT true CHECK (id),
  paused boolean NOT NULL DEFAULT false,
  reason text,
  changed_at timestamptz NOT NULL DEFAULT now(),
  changed_by text
);
INSERT INTO sending_control (id) VALUES (true);

-- Token buckets shared by every replica: `global` and one per recipient domain (`domain:<name>`).
-- Refilled on the database clock at the rate the caller passes, so replicas never disagree on time.
CREATE TABLE rate_buckets (
  key text PRIMARY KEY,
  tokens double precision NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Takes up to wants[i] tokens for group i from both `global` and `domain:<domains[i]>`, in order,
-- in one round trip; returns what each group got and, when a group got less than it wanted, how long
-- until the scarcer of its two buckets holds a token again. Rows are locked in key order (global
-- first, then domains sorted) so concurrent callers cannot deadlock.
CREATE FUNCTION take_send_tokens(
  domains text[], wants int[], global_rate double precision, global_burst double precision,
  domain_rate double precision, domain_burst double precision
) RETURNS TABLE (granted int, wait_ms int)
LANGUAGE plpgsql AS $$
DECLARE
  t timestamptz := clock_timestamp();
  g_avail double precision;
  d_avail double precision;
  i int;
  n int;
  k text;
BEGIN
  INSERT INTO rate_buckets (key, tokens, updated_at)
  SELECT x.key, CASE WHEN x.key = 'global' THEN global_burst ELSE domain_burst END, t
  FROM (SELECT 'global' AS key UNION SELECT 'domain:' || d FROM unnest(domains) AS d) x
  -- In key order, like the lock below: two callers creating the same new domains cannot deadlock.
  ORDER BY x.key = 'global' DESC, x.key
  ON CONFLICT (key) DO NOTHING;
  PERFORM 1 FROM rate_buckets
  WHERE key = 'global' OR key = ANY (SELECT 'domain:' || d FROM unnest(domains) AS d)
  ORDER BY key = 'global' DESC, key FOR UPDATE;

  SELECT LEAST(global_burst, tokens + global_rate * EXTRACT(EPOCH FROM t - updated_at))
    INTO g_avail FROM rate_buckets WHERE key = 'global';
  FOR i IN 1 .. coalesce(array_length(domains, 1), 0) LOOP
    k := 'domain:' || domains[i];
    SELECT LEAST(domain_burst, tokens + domain_rate * EXTRACT(EPOCH FROM t - updated_at))
      INTO d_avail FROM rate_buckets WHERE key = k;
    n := GREATEST(0, LEAST(wants[i], floor(g_avail)::int, floor(d_avail)::int));
    g_avail := g_avail - n;
    UPDATE rate_buckets SET tokens = d_avail - n, updated_at = t WHERE key = k;
    granted := n;
    wait_ms := CASE WHEN n >= wants[i] THEN 0
      ELSE ceil(1000 * GREATEST((1 - g_avail) / global_rate, (1 - (d_avail - n)) / domain_rate, 0.001))::int END;
    RETURN NEXT;
  END LOOP;
  UPDATE rate_buckets SET tokens = g_avail, updated_at = t WHERE key = 'global';
END
$$;

-- Provider outcomes per campaign per second, so the auto-pause window is shared by the replicas and
-- survives restarts. Rows older than the window are deleted by the statement that adds new ones.
CREATE TABLE provider_outcomes (
  campaign_id text NOT NULL,
  second timestamptz NOT NULL,
  attempts int NOT NULL,
  failures int NOT NULL,
  PRIMARY KEY (campaign_id, second)
);

-- Down Migration
DROP TABLE provider_outcomes;
DROP FUNCTION take_send_tokens(text[], int[], double precision, double precision, double precision, double precision);
DROP TABLE rate_buckets;
DROP TABLE sending_control;
