/**
 * Given a request (validated) and the candidate's variant decision, when decided at the database's
 * `now`, then what to emit and keep; given a sequence that advanced, when its step was sent, then
 * the follow-up it schedules.
 */
import { sendIdFor, uuidV5, type OutreachRequested } from '@outreach/contracts';
import { describe, expect, it } from 'vitest';
import { planFollowUp, planRequest, type AdvancedSequence, type StoredFollowUp } from './plan.js';
import { plannedRequest as planned, plannedSendOf } from '../../test/requests.js';
import type { Content, VariantDecision } from './request.js';

const NOW = 1_700_000_000_000;
/** The envelope of what the planner writes about request r1 at NOW, in Ada's conversation. */
const plannedAtNow = {
  occurredAt: NOW,
  producer: 'planner',
  correlationId: 'corr',
  causationId: '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11',
  conversationId: 'camp:Ada',
  campaignId: 'camp',
  candidateKey: 'Ada',
};

const given = (fields: Partial<OutreachRequested>, decision: VariantDecision | null = null) => ({
  whenDecidedAt: (now: number) => planRequest(planned(fields), decision, now),
});

const arms = [
  { variant: 'A', subject: 'a', body: 'body a' },
  { variant: 'B', subject: 'b', body: 'body b' },
];
const followUp = (
  step: string,
  delayMs: number,
  contents: readonly Content[] = [{ variant: null, subject: step, body: `${step} body` }],
) => ({
  step,
  delayMs,
  contents,
});

describe('planRequest (a request)', () => {
  it('given no sendAt, then a SendRequested now and nothing scheduled', () => {
    const result = given({}).whenDecidedAt(NOW);
    expect(result).toEqual({
      ok: true,
      plan: {
        send: expect.objectContaining({
          type: 'SendRequested',
          eventId: uuidV5('send-requested', sendIdFor('camp', 'Ada', 'intro')),
          occurredAt: NOW,
          causationId: '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11',
          sendId: sendIdFor('camp', 'Ada', 'intro'),
          step: 'intro',
          experimentId: null,
          variant: null,
          subject: 'Hi',
          scheduledFor: null,
          conversationId: 'camp:Ada',
        }),
        schedule: null,
        sequence: null,
        planned: {
          type: 'SequencePlanned',
          eventId: uuidV5('sequence-planned', 'camp:Ada', 'r1', sendIdFor('camp', 'Ada', 'intro')),
          ...plannedAtNow,
          steps: ['intro'],
        },
      },
    });
  });

  it('given a sendAt that is not after now (the database clock), then it is sent now', () => {
    for (const sendAt of [NOW, NOW - 60_000]) {
      const result = given({ sendAt }).whenDecidedAt(NOW);
      expect(result.ok && result.plan.schedule).toBeNull();
      expect(result.ok && result.plan.send?.scheduledFor).toBeNull();
    }
  });

  it('given a sendAt after now, then the step is scheduled for it, with its NextStepScheduled, and nothing is sent', () => {
    const result = given({ sendAt: NOW + 1 }).whenDecidedAt(NOW);
    expect(result).toEqual({
      ok: true,
      plan: {
        send: null,
        schedule: {
          send: expect.objectContaining({ sendId: sendIdFor('camp', 'Ada', 'intro'), step: 'intro', subject: 'Hi' }),
          dueAt: NOW + 1,
          event: {
            type: 'NextStepScheduled',
            eventId: uuidV5('next-step-scheduled', 'camp:Ada', 'intro', String(NOW + 1)),
            ...plannedAtNow,
            stepId: 'intro',
            dueAt: NOW + 1,
          },
        },
        sequence: null,
        planned: expect.objectContaining({ type: 'SequencePlanned', steps: ['intro'] }),
      },
    });
  });

  it("given follow-ups and a candidate in arm B, then every step carries B's content (or the shared one) and the sequence waits on the head", () => {
    const result = given(
      {
        experimentId: 'exp',
        contents: arms,
        followUps: [followUp('nudge', 60_000, arms), followUp('last', 120_000)],
      },
      { enrolled: true, variant: 'B' },
    ).whenDecidedAt(NOW);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.plan.send).toMatchObject({ variant: 'B', experimentId: 'exp', subject: 'b' });
    expect(result.plan.sequence).toEqual({
      head: expect.objectContaining({ step: 'intro', variant: 'B', experimentId: 'exp', subject: 'b' }),
      followUps: [
        { step: 'nudge', delayMs: 60_000, content: arms[1], variant: 'B' },
        {
          step: 'last',
          delayMs: 120_000,
          content: { variant: null, subject: 'last', body: 'last body' },
          variant: 'B',
        },
      ],
    });
  });

  it('given a candidate not enrolled, then the default content, without a variant or an experiment', () => {
    const result = given(
      { experimentId: 'exp', contents: [...arms, { variant: null, subject: 'd', body: 'default' }] },
      { enrolled: false, reason: 'exclusion group' },
    ).whenDecidedAt(NOW);
    expect(result.ok && result.plan.send).toMatchObject({ variant: null, experimentId: null, subject: 'd' });
  });

  it('given follow-ups and a conversation id, then the plan lists every step in order under that conversation, and the send carries it', () => {
    const result = given({
      conversationId: ' Thread-7\u200b',
      followUps: [followUp('Nudge', 60_000), followUp('last', 120_000)],
    }).whenDecidedAt(NOW);
    expect(result.ok && result.plan.planned).toMatchObject({
      conversationId: 'Thread-7',
      steps: ['intro', 'nudge', 'last'],
    });
    expect(result.ok && result.plan.send?.conversationId).toBe('Thread-7');
    expect(result.ok && result.plan.sequence?.head.conversationId).toBe('Thread-7');
  });

  it('names the plan by its conversation and request: a redelivery or a retry plans the same event, another request another one', () => {
    const plan = (fields: Partial<OutreachRequested>) => {
      const result = given(fields).whenDecidedAt(NOW);
      return result.ok ? result.plan.planned.eventId : undefined;
    };
    expect(plan({ eventId: '1b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11' })).toBe(plan({}));
    expect(plan({ requestId: 'r2' })).not.toBe(plan({}));
  });

  it('given no content for the assigned variant, then refused with a reason', () => {
    expect(given({ experimentId: 'exp', contents: arms }, { enrolled: true, variant: 'C' }).whenDecidedAt(NOW)).toEqual(
      {
        ok: false,
        reason: 'request has no content for the assigned variant C',
        code: 'no_content_for_variant',
        at: 'contents',
      },
    );
    expect(
      given({ experimentId: 'exp', contents: arms }, { enrolled: false, reason: 'experiment is paused' }).whenDecidedAt(
        NOW,
      ),
    ).toEqual({
      ok: false,
      reason: 'candidate is not enrolled (experiment is paused) and the request has no default content',
      code: 'no_default_content',
      at: 'contents',
    });
  });

  it('given a follow-up without content for the variant, then refused, naming the follow-up and not its content', () => {
    const result = given(
      {
        experimentId: 'exp',
        contents: arms,
        followUps: [followUp('nudge', 60_000, [{ variant: 'A', subject: 'secret subject', body: 'secret body' }])],
      },
      { enrolled: true, variant: 'B' },
    ).whenDecidedAt(NOW);
    expect(result).toEqual({
      ok: false,
      reason: 'followUps[0]: request has no content for the assigned variant B',
      code: 'no_content_for_variant',
      at: 'followUps[0].contents',
    });
  });
});

describe('planFollowUp (a sequence whose awaited step was sent)', () => {
  const template = plannedSendOf('intro', { subject: 'b', body: 'body b' });
  const followUps: StoredFollowUp[] = [
    { step: 'nudge', delayMs: 60_000, content: { variant: 'B', subject: 'nudge b', body: 'nb' }, variant: 'B' },
    { step: 'last', delayMs: 120_000, content: { variant: null, subject: 'last', body: 'lb' }, variant: null },
  ];
  const advancedTo = (nextIndex: number): AdvancedSequence => ({ template, followUps, nextIndex });

  it("given the head was sent, then the first follow-up is scheduled delayMs after the sender's record, as its own send", () => {
    const sentAt = NOW - 5_000;
    expect(planFollowUp(advancedTo(0), sentAt, NOW)).toEqual({
      send: {
        ...template,
        step: 'nudge',
        sendId: sendIdFor('camp', 'Ada', 'nudge'),
        variant: 'B',
        experimentId: 'exp',
        subject: 'nudge b',
        body: 'nb',
      },
      dueAt: sentAt + 60_000,
      event: expect.objectContaining({
        type: 'NextStepScheduled',
        eventId: uuidV5('next-step-scheduled', 'camp:Ada', 'nudge', String(sentAt + 60_000)),
        occurredAt: NOW,
        stepId: 'nudge',
        dueAt: sentAt + 60_000,
      }),
    });
  });

  it('given a follow-up without a variant, then its send names no experiment', () => {
    expect(planFollowUp(advancedTo(1), NOW, NOW)?.send).toMatchObject({
      step: 'last',
      variant: null,
      experimentId: null,
    });
  });

  it('given a sequence with no follow-up left, then nothing to schedule', () => {
    expect(planFollowUp(advancedTo(2), NOW, NOW)).toBeNull();
  });
});
