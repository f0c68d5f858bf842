/**
 * The sender's check-before-compose endpoint (`GET /v1/sends/check`) at a fixed 1k requests/s, with
 * autocannon, over a sent log seeded with `rows` rows; half the checked candidates were sent to.
 */
import autocannon from 'autocannon';
import pg from 'pg';
import { say } from './common.js';
import { benchStack, runId, type BenchEnv } from './harness.js';
import type { CheckResult } from './report.js';

const TARGET_RATE = 1_000;

export async function checkEndpoint(env: BenchEnv, rows: number): Promise<CheckResult> {
  const stack = await benchStack(env, runId('check'), () => ({ MAIL_PROVIDER: 'null' }));
  await stack.start('sender');
  const client = new pg.Client({ connectionString: env.databaseUrl });
  await client.connect();
  const seeded = Date.now();
  await client.query(
    `INSERT INTO "${stack.schema('sender')}".sends
       (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step, subject, body,
        request_id, correlation_id, status, sent_at)
     SELECT md5(i::text)::uuid, 'bench', 'cand-' || i, 'cand-' || i, 'cand-' || i || '@example.com',
            'cand-' || i || '@example.com', md5('cand-' || i), 'intro', 's', 'b', 'r-' || i, 'c-' || i, 'sent', now()
     FROM generate_series(1, $1::int) AS i`,
    [rows],
  );
  await client.query(`ANALYZE "${stack.schema('sender')}".sends`);
  await client.end();
  say(`  seeded ${rows} sent rows in ${((Date.now() - seeded) / 1000).toFixed(1)} s`);
  let i = 0;
  const result = await autocannon({
    url: stack.url('sender', ''),
    connections: 32,
    overallRate: TARGET_RATE,
    duration: 20,
    requests: [
      {
        method: 'GET',
        // The check reveals send details: it needs the read scope.
        headers: { authorization: 'Bearer bench-token' },
        setupRequest: (request: autocannon.Request) => ({
          ...request,
          path: `/v1/sends/check?campaignId=bench&candidateId=cand-${(i++ * 7919) % (rows * 2)}&step=intro&email=cand-${i}@example.com`,
        }),
      },
    ],
  });
  await stack.stopAll();
  await stack.dropData(['sender']);
  return {
    rows,
    targetRate: TARGET_RATE,
    achievedRate: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    max: result.latency.max,
    errors: result.errors + result.non2xx,
  };
}
