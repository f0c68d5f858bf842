/**
 * The experiment service's assignments over HTTP, with autocannon: new candidates one per call
 * (`PUT /v1/experiments/:id/assignments/:candidateId`), then in batches of 500 per call.
 */
import autocannon from 'autocannon';
import { benchStack, runId, type BenchEnv } from './harness.js';
import type { ExperimentResult } from './report.js';

const BATCH = 500;

/** Each of the two runs lasts `seconds`. */
export async function experimentAssignments(env: BenchEnv, seconds = 15): Promise<ExperimentResult> {
  const stack = await benchStack(env, runId('exp'));
  await stack.start('experiment');
  await stack.json('experiment', '/v1/experiments', {
    method: 'POST',
    body: {
      experimentId: 'bench',
      variants: [
        { name: 'a', weight: 1 },
        { name: 'b', weight: 1 },
      ],
    },
  });
  const auth = { authorization: 'Bearer bench-token' };
  const headers = { ...auth, 'content-type': 'application/json' };
  let single = 0;
  const singleRun = await autocannon({
    url: stack.url('experiment', ''),
    connections: 16,
    duration: seconds,
    requests: [
      {
        method: 'PUT',
        headers: auth,
        setupRequest: (request: autocannon.Request) => ({
          ...request,
          path: `/v1/experiments/bench/assignments/single-${single++}`,
        }),
      },
    ],
  });
  let batch = 0;
  const batchRun = await autocannon({
    url: stack.url('experiment', ''),
    connections: 4,
    duration: seconds,
    requests: [
      {
        method: 'POST',
        path: '/v1/experiments/bench/assignments',
        headers,
        setupRequest: (request: autocannon.Request) => {
          const start = batch++ * BATCH;
          return {
            ...request,
            body: JSON.stringify({ candidateIds: Array.from({ length: BATCH }, (_, k) => `batch-${start + k}`) }),
          };
        },
      },
    ],
  });
  await stack.stopAll();
  await stack.dropData(['experiment']);
  return {
    singlePerSecond: Math.round(singleRun.requests.average),
    singleP99Ms: singleRun.latency.p99,
    batchSize: BATCH,
    batchedPerSecond: Math.round(batchRun.requests.average * BATCH),
    batchP99Ms: batchRun.latency.p99,
    errors: singleRun.errors + singleRun.non2xx + batchRun.errors + batchRun.non2xx,
  };
}
