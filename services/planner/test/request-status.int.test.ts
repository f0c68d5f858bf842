/**
 * What became of a request, against the real broker and database with the real sender (in-process,
 * delivering to an SMTP sink) on the same topics: `GET /v1/outreach-requests/:requestId` moves
 * accepted → planned → sent as the planner decides and the sender's SendRecorded (which names the
 * request, schema v4) arrives; a redelivered, an older and a later SendRecorded of the same send
 * move nothing back. The experiment service is an HTTP server the test starts, down (503) until the
 * test lets it answer, so the request is held in `accepted` for as long as the test needs.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { eventCodec, sendIdFor, type SendRecorded } from '@outreach/contracts';
import { readTopic, sendRecorded, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { senderTestEnv, type SenderTestEnv } from '../../sender/test/harness.js';
import { auth, infra, plannerTestEnv } from './harness.js';

let planner: ServiceTestEnv;
let sender: SenderTestEnv;
let app: FastifyInstance;
let experiment: http.Server;
const stub = { answering: false, assignmentCalls: 0 };

beforeAll(async () => {
  // The experiment API as the planner calls it: 503 (down) until `answering`, then every candidate in A.
  experiment = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      const assignments = req.method === 'POST' && /\/assignments$/.test(req.url ?? '');
      if (assignments) stub.assignmentCalls++;
      res.setHeader('content-type', 'application/json');
      if (!stub.answering) return res.writeHead(503).end('{"error":"UNAVAILABLE","message":"down"}');
      if (assignments) {
        const { candidateIds } = JSON.parse(body) as { candidateIds: string[] };
        return res.writeHead(200).end(
          JSON.stringify({
            assignments: candidateIds.map((candidateKey) => ({ candidateKey, enrolled: true, variant: 'A' })),
          }),
        );
      }
      return res.writeHead(200).end(JSON.stringify({ variants: [{ name: 'A', weight: 1 }] }));
    });
  });
  await new Promise<void>((resolve) => experiment.listen(0, '127.0.0.1', resolve));
  planner = await plannerTestEnv({
    EXPERIMENT_URL: `http://127.0.0.1:${(experiment.address() as AddressInfo).port}`,
    EXPERIMENT_TIMEOUT_MS: '1000',
    SCHEDULER_INTERVAL_MS: '100',
    // The retention task at once and often; what it purges is aged by the test (30 days, the default).
    REQUEST_STATUS_PURGE_INTERVAL_MS: '200',
  });
  sender = await senderTestEnv(infra, { env: { TOPIC_PREFIX: planner.prefix } });
  app = await planner.startApp();
  await sender.startApp();
}, 180_000);
afterAll(async () => {
  await sender?.cleanup();
  await planner?.cleanup();
  await new Promise((resolve) => experiment?.close(resolve));
});

interface StatusReply {
  requestId: string;
  status: string;
  rejection: unknown;
  sends: Array<{ sendId: string; step: string; status: string; at: string | null; reason: string | null }>;
}
const status = async (requestId: string) => {
  const response = await app.inject({ url: `/v1/outreach-requests/${encodeURIComponent(requestId)}`, headers: auth });
  return { code: response.statusCode, body: response.json() as StatusReply };
};

const decode = (m: { value: Buffer | null }) => eventCodec.decode(m.value as Buffer);

/** Waits until the projection has read the sentinel, published after `events` on their partition. */
async function publishAndSettle(events: readonly SendRecorded[], candidateKey: string) {
  const sentinel: SendRecorded = {
    ...(events[0] as SendRecorded),
    eventId: randomUUID(),
    sendId: sendIdFor('camp-status', candidateKey, `sentinel-${randomUUID()}`),
    step: 'sentinel',
    outcome: 'held',
    requestId: 'sentinel',
  };
  // One key, one partition, in this order: when the sentinel is stored, the others were read.
  await planner.publish('sendRecorded', [...events, sentinel]);
  await waitFor(
    async () => (await planner.query('SELECT 1 FROM send_outcomes WHERE send_id = $1', [sentinel.sendId])).length === 1,
    { timeoutMs: 30_000, description: 'the sentinel SendRecorded projected' },
  );
}

/** Posts a request for step `intro` due a day from now (the real sender never sends it) and waits until it is planned. */
async function postPlanned(requestId: string, campaignId: string, candidateKey: string): Promise<void> {
  const posted = await app.inject({
    method: 'POST',
    url: '/v1/outreach-requests',
    headers: auth,
    payload: {
      requestId,
      campaignId,
      candidateId: candidateKey,
      email: `${candidateKey}@pii-marker.example`,
      step: 'intro',
      sendAt: new Date(Date.now() + 86_400_000).toISOString(),
      contents: [{ subject: 'Hello', body: 'Hi' }],
    },
  });
  expect(posted.statusCode, posted.body).toBe(202);
  await waitFor(async () => (await status(requestId)).body.status === 'planned', {
    timeoutMs: 30_000,
    description: `${requestId} planned`,
  });
}

/** The sender's SendRecorded for step `intro` of a request, as the test plays the sender. */
function recordOf(
  request: { requestId: string; campaignId: string; candidateKey: string },
  outcome: SendRecorded['outcome'],
  recordedAt: number,
): SendRecorded {
  return sendRecorded(request.candidateKey, 'intro', {
    occurredAt: recordedAt,
    campaignId: request.campaignId,
    outcome,
    reason: outcome === 'sent' ? null : `the sender's ${outcome}`,
    recordedAt,
    requestId: request.requestId,
  });
}

describe('GET /v1/outreach-requests/:requestId', () => {
  it('moves accepted → planned → sent as the planner decides and the sender records; each send has its status', async () => {
    const requestId = `pub-${randomUUID()}`;
    const posted = await app.inject({
      method: 'POST',
      url: '/v1/outreach-requests',
      headers: auth,
      payload: {
        requestId,
        campaignId: 'camp-status',
        candidateId: 'cand-status',
        email: 'status.person@pii-marker.example',
        step: 'intro',
        experimentId: 'exp',
        // Due a few seconds from now: the plan is observable before the send.
        sendAt: new Date(Date.now() + 6_000).toISOString(),
        contents: [{ variant: 'A', subject: 'Hello', body: 'Would you like to talk?' }],
        followUps: [
          { step: 'nudge', delayMs: 86_400_000, contents: [{ variant: 'A', subject: 'Again', body: 'Still?' }] },
        ],
      },
    });
    expect(posted.statusCode, posted.body).toBe(202);
    expect(posted.json()).toMatchObject({ experimentChecked: false });

    // The consumer has read it and waits for the experiment service: still accepted.
    await waitFor(async () => stub.assignmentCalls > 0, { timeoutMs: 30_000, description: 'the consumer asked' });
    const accepted = await status(requestId);
    expect(accepted).toMatchObject({ code: 200, body: { requestId, status: 'accepted', rejection: null, sends: [] } });

    stub.answering = true;
    const seen: string[] = ['accepted'];
    let last: StatusReply | undefined;
    await waitFor(
      async () => {
        last = (await status(requestId)).body;
        if (seen.at(-1) !== last.status) seen.push(last.status);
        return last.status === 'sent' && last.sends[1]?.status === 'scheduled';
      },
      { timeoutMs: 60_000, intervalMs: 50, description: 'the request sent and its follow-up scheduled' },
    );
    expect(seen).toEqual(['accepted', 'planned', 'sent']);
    const intro = sendIdFor('camp-status', 'cand-status', 'intro');
    expect(last?.sends).toEqual([
      { sendId: intro, step: 'intro', status: 'sent', at: expect.any(String), reason: null },
      {
        sendId: sendIdFor('camp-status', 'cand-status', 'nudge'),
        step: 'nudge',
        status: 'scheduled',
        at: expect.any(String),
        reason: null,
      },
    ]);
    // The follow-up is due a day after the send.
    expect(Date.parse(last?.sends[1]?.at ?? '') - Date.parse(last?.sends[0]?.at ?? '')).toBe(86_400_000);

    // The sender's SendRecorded names the request (v4): requestId → sendId → outcome, directly.
    const recorded = (
      await readTopic(
        planner.kafka,
        planner.topic('sendRecorded'),
        (m) => m.map(decode).some((e) => 'sendId' in e && e.sendId === intro),
        30_000,
      )
    )
      .map(decode)
      .filter((e): e is SendRecorded => e.type === 'SendRecorded' && e.sendId === intro);
    expect(recorded.map((e) => [e.outcome, e.requestId])).toEqual([['sent', requestId]]);
    const sent = recorded[0] as SendRecorded;
    expect(Date.parse(last?.sends[0]?.at ?? '')).toBe(sent.recordedAt);

    // The same record again, an older one and a later one of the same send: still sent, as recorded.
    await publishAndSettle(
      [
        sent,
        {
          ...sent,
          eventId: randomUUID(),
          outcome: 'held',
          reason: 'campaign paused',
          recordedAt: sent.recordedAt - 60_000,
        },
        {
          ...sent,
          eventId: randomUUID(),
          outcome: 'failed',
          reason: 'late noise',
          recordedAt: sent.recordedAt + 60_000,
        },
      ],
      'cand-status',
    );
    const after = (await status(requestId)).body;
    expect(after.status).toBe('sent');
    expect(after.sends[0]).toEqual({
      sendId: intro,
      step: 'intro',
      status: 'sent',
      at: new Date(sent.recordedAt).toISOString(),
      reason: null,
    });
  });

  it('keeps the latest outcome of a send whatever the arrival order: held then sent, and sent then a late held', async () => {
    const requestId = `pub-${randomUUID()}`;
    const candidateKey = `cand-${randomUUID().slice(0, 8)}`;
    await postPlanned(requestId, 'camp-status', candidateKey);
    expect((await status(requestId)).body.sends).toEqual([
      expect.objectContaining({ step: 'intro', status: 'scheduled' }),
    ]);
    const t0 = Date.now();
    const record = (outcome: SendRecorded['outcome'], recordedAt: number) =>
      recordOf({ requestId, campaignId: 'camp-status', candidateKey }, outcome, recordedAt);

    await publishAndSettle([record('held', t0)], candidateKey);
    expect((await status(requestId)).body).toMatchObject({
      status: 'held',
      sends: [{ status: 'held', reason: "the sender's held", at: new Date(t0).toISOString() }],
    });
    // Released and sent, then the held record delivered again and an ambiguous one from before: sent.
    await publishAndSettle(
      [record('sent', t0 + 1_000), record('held', t0), record('ambiguous', t0 + 500)],
      candidateKey,
    );
    expect((await status(requestId)).body).toMatchObject({
      status: 'sent',
      sends: [{ status: 'sent', reason: null, at: new Date(t0 + 1_000).toISOString() }],
    });
    // Nothing takes a sent send away, not even a later record naming another request.
    await publishAndSettle([{ ...record('failed', t0 + 9_000), requestId: `${requestId}-other` }], candidateKey);
    expect((await status(requestId)).body).toMatchObject({ status: 'sent', sends: [{ status: 'sent' }] });
  });

  it('forgets a request once nothing about it is open and nothing changed for 30 days; an open step or a recent outcome keeps it', async () => {
    const request = (name: string) => ({
      requestId: `pub-${name}-${randomUUID()}`,
      campaignId: 'camp-retention',
      candidateKey: `cand-${randomUUID().slice(0, 8)}`,
    });
    // old: its step handed to the sender 31 days ago, no outcome since. scheduled: its step still due.
    // held: an outcome 31 days old, but held (open). recent: sent, and the outcome is recent.
    const [old, scheduled, held, recent] = ['old', 'scheduled', 'held', 'recent'].map(request) as [
      ReturnType<typeof request>,
      ReturnType<typeof request>,
      ReturnType<typeof request>,
      ReturnType<typeof request>,
    ];
    for (const r of [old, scheduled, held, recent]) await postPlanned(r.requestId, r.campaignId, r.candidateKey);
    const sendOf = (r: ReturnType<typeof request>) => sendIdFor(r.campaignId, r.candidateKey, 'intro');
    await publishAndSettle([recordOf(held, 'held', Date.now())], held.candidateKey);
    await publishAndSettle([recordOf(recent, 'sent', Date.now())], recent.candidateKey);
    // Outcomes no request lists (a SendRecorded of a request the planner never saw): one old, one not.
    const [orphanOld, orphanNew] = [randomUUID(), randomUUID()];
    for (const sendId of [orphanOld, orphanNew])
      await planner.query(
        `INSERT INTO send_outcomes (send_id, outcome, recorded_at, event_id) VALUES ($1, 'sent', now(), $2)`,
        [sendId, randomUUID()],
      );
    // 31 days pass (the test ages the rows; the scheduler leaves steps due tomorrow alone).
    const age = "now() - interval '31 days'";
    const all = [old, scheduled, held, recent];
    await planner.query(`UPDATE requests SET updated_at = ${age} WHERE request_id = ANY($1)`, [
      all.map((r) => r.requestId),
    ]);
    await planner.query(
      `UPDATE scheduled_steps SET status = 'emitted', emitted_at = ${age}, updated_at = ${age} WHERE send_id = ANY($1)`,
      [[old, held, recent].map(sendOf)],
    );
    await planner.query(`UPDATE send_outcomes SET updated_at = ${age} WHERE send_id = ANY($1)`, [
      [orphanOld, sendOf(held)],
    ]);

    await waitFor(async () => (await status(old.requestId)).code === 404, {
      timeoutMs: 30_000,
      description: 'the old request purged',
    });
    const outcomes = async () =>
      (
        await planner.query<{ send_id: string }>('SELECT send_id::text FROM send_outcomes WHERE send_id = ANY($1)', [
          [sendOf(held), sendOf(recent), orphanOld, orphanNew],
        ])
      ).map((r) => r.send_id);
    await waitFor(async () => !(await outcomes()).includes(orphanOld), {
      timeoutMs: 30_000,
      description: 'the old orphan outcome purged',
    });
    expect(await planner.query('SELECT 1 FROM request_sends WHERE request_id = $1', [old.requestId])).toEqual([]);
    // Judged in the same statement as the old one: each is still there, sends and all.
    expect((await status(scheduled.requestId)).body).toMatchObject({
      status: 'planned',
      sends: [{ status: 'scheduled' }],
    });
    expect((await status(held.requestId)).body).toMatchObject({ status: 'held', sends: [{ status: 'held' }] });
    expect((await status(recent.requestId)).body).toMatchObject({ status: 'sent', sends: [{ status: 'sent' }] });
    expect((await outcomes()).sort()).toEqual([sendOf(held), sendOf(recent), orphanNew].sort());

    // The sent outcome ages too: that request goes, with its planned send and the outcome.
    await planner.query(`UPDATE send_outcomes SET updated_at = ${age} WHERE send_id = $1`, [sendOf(recent)]);
    await waitFor(async () => (await status(recent.requestId)).code === 404, {
      timeoutMs: 30_000,
      description: 'the request purged once its outcome aged',
    });
    await waitFor(async () => !(await outcomes()).includes(sendOf(recent)), {
      timeoutMs: 30_000,
      description: 'its outcome purged',
    });
    expect((await outcomes()).sort()).toEqual([sendOf(held), orphanNew].sort());
    expect((await status(scheduled.requestId)).code).toBe(200);
    expect((await status(held.requestId)).code).toBe(200);
  });
});
