/**
 * The reply rate per variant (issue #33): MessageReceived on conversation.events.v1 counted against
 * the variants of the candidates sent the experiment's message, on the real broker and database.
 */
import { randomUUID } from 'node:crypto';
import type { MessageReceived } from '@outreach/contracts';
import { waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import {
  auth,
  createExperiment,
  experimentEnv,
  postAssignments,
  replayFromLog,
  sendRecorded,
} from './experiment-env.js';

let t: ServiceTestEnv;
afterEach(() => t?.cleanup());

const reply = (candidateKey: string, fields: Partial<MessageReceived> = {}): MessageReceived => ({
  type: 'MessageReceived',
  eventId: randomUUID(),
  occurredAt: Date.now(),
  producer: 'agent',
  correlationId: `camp:${candidateKey}`,
  causationId: null,
  conversationId: `camp:${candidateKey}`,
  campaignId: 'camp',
  candidateKey,
  messageId: null,
  ...fields,
});

describe('reply rate per variant', () => {
  it('counts each exposed candidate that replied in the campaign after the send once, whatever the order the topics arrive in, and replays to the same counts', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, {
      experimentId: 'subject-line',
      variants: [
        { name: 'A', weight: 1 },
        { name: 'B', weight: 1 },
      ],
    });
    const keys = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7', 'r8'];
    const assigned = new Map(
      (
        (await postAssignments(app, 'subject-line', keys)).json().assignments as Array<{
          candidateKey: string;
          variant: string;
        }>
      ).map((a) => [a.candidateKey, a.variant]),
    );
    const variantOf = (key: string) => assigned.get(key) as string;
    const other = (v: string) => (v === 'A' ? 'B' : 'A');
    const sentAt = Date.now();
    const later = sentAt + 60_000;

    // r1's reply is read before its send: it counts once the exposure arrives.
    const early = reply('r1', { occurredAt: later });
    await t.publish('conversationEvents', [early]);
    await waitFor(async () => (await t.query('SELECT 1 FROM reply_events')).length === 1 || undefined, {
      timeoutMs: 30_000,
      description: 'the early reply stored',
    });
    let report = (await app.inject({ url: '/v1/experiments/subject-line/report', headers: auth })).json();
    expect(report.variants.map((v: { repliedCandidates: number }) => v.repliedCandidates)).toEqual([0, 0]);

    const sends = keys
      .filter((k) => k !== 'r8')
      .map((k) => sendRecorded({ experimentId: 'subject-line', candidateKey: k, variant: variantOf(k), step: 'intro' }))
      .map((e) => ({ ...e, recordedAt: sentAt }));
    // r6 is also sent the other arm: contaminated, out of every metric.
    sends.push({
      ...sendRecorded({
        experimentId: 'subject-line',
        candidateKey: 'r6',
        variant: other(variantOf('r6')),
        step: 'follow-up',
      }),
      recordedAt: sentAt,
    });
    await t.publish('sendRecorded', sends);

    const twice = reply('r2', { occurredAt: later });
    const replies = [
      twice,
      twice, // redelivered: one event
      reply('r2', { occurredAt: later + 1 }), // a second reply: one candidate
      reply('r3', { occurredAt: sentAt - 60_000 }), // before the send: a reply to something else
      reply('r4', { occurredAt: later, campaignId: 'another-campaign' }), // another campaign's conversation
      reply('r5', { occurredAt: later }),
      reply('r6', { occurredAt: later }), // contaminated
      reply('r8', { occurredAt: later }), // never sent this experiment's message
    ];
    await t.publish('conversationEvents', replies);
    await waitFor(
      async () =>
        ((await t.query('SELECT 1 FROM reply_events')).length === 8 &&
          (await t.query('SELECT 1 FROM exposure_events')).length === 8) ||
        undefined,
      { timeoutMs: 30_000, description: 'replies and exposures stored' },
    );

    report = (await app.inject({ url: '/v1/experiments/subject-line/report', headers: auth })).json();
    const expected = (variant: string) => ['r1', 'r2', 'r5'].filter((k) => variantOf(k) === variant).length;
    const exposed = (variant: string) =>
      ['r1', 'r2', 'r3', 'r4', 'r5', 'r7'].filter((k) => variantOf(k) === variant).length;
    for (const variant of ['A', 'B'])
      expect(
        report.variants.find((v: { variant: string }) => v.variant === variant),
        variant,
      ).toMatchObject({
        repliedCandidates: expected(variant),
        exposedCandidates: exposed(variant),
      });

    const replay = await replayFromLog(t);
    expect(replay.replies.live).toEqual(replay.replies.replayed);
    // r1, r2, r5, and contaminated r6 under each arm it was sent
    expect(replay.replies.live.reduce((sum, r) => sum + r.candidates, 0)).toBe(5);
    expect(replay.matches).toBe(true);
  });
});
