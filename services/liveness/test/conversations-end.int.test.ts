/**
 * Conversations end (issue #18), against the real broker and database, on compressed time: a
 * campaign of 1,000 conversations, driven through the topics the planner, the sender and agents
 * write (plans, sends with and without their conversation id, schedules, replies, closes), runs to
 * completion with two liveness instances. After every window has passed, exactly the planted
 * stalls are flagged and exactly the sequences sent in full without a reply are closed
 * (`sequence_completed`). And a send that names no conversation is filed under the conversation
 * that planned its step: live, when the plan comes after it in the log, and in a rebuild that reads
 * the two topics at its own pace.
 */
import { randomUUID } from 'node:crypto';
import {
  eventCodec,
  type ConversationClosed,
  type ConversationStalled,
  type MessageReceived,
  type NextStepScheduled,
  type OutreachEvent,
  type SendRecorded,
  type SequencePlanned,
  type StepCancelled,
} from '@outreach/contracts';
import { readTopic, sendRecordedEvent, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { auth, livenessEnv, rebuildFromLog, sweepsDone } from './liveness-env.js';

const CAMPAIGN = 'camp-end';
// The campaign's graces, compressed; the service defaults are long, so only the campaign's apply.
const GRACES = { inboundMs: 10_000, outboundMs: 10_000, overdueMs: 8_000, replyWindowMs: 5_000 };
const DEFAULTS = { inboundMs: 3_600_000, outboundMs: 3_600_000, overdueMs: 3_600_000, replyWindowMs: 3_600_000 };
const FAR = 3_600_000;
let t: ServiceTestEnv | undefined;
afterEach(async () => {
  await t?.cleanup();
  t = undefined;
});

/** One conversation of the campaign: its candidate, its id (given or derived), and whether sends name it. */
interface Conversation {
  readonly candidateKey: string;
  readonly conversationId: string;
  /** The sender copies the conversation id (a SendRecorded v3), or does not yet (filed by its step). */
  readonly sendsNameIt: boolean;
}

function conversation(i: number): Conversation {
  const candidateKey = `cand-${i}`;
  // Every other conversation has an id of its own (given in the request); half of those are named by their sends.
  const custom = i % 2 === 0;
  return {
    candidateKey,
    conversationId: custom ? `thread-${i}` : `${CAMPAIGN}:${candidateKey}`,
    sendsNameIt: !custom || i % 4 === 0,
  };
}

const envelope = (c: Conversation, producer: string) => ({
  eventId: randomUUID(),
  occurredAt: Date.now(),
  producer,
  correlationId: c.candidateKey,
  causationId: null,
  conversationId: c.conversationId,
  campaignId: CAMPAIGN,
  candidateKey: c.candidateKey,
});
const planned = (c: Conversation, ...steps: string[]): SequencePlanned => ({
  type: 'SequencePlanned',
  ...envelope(c, 'planner'),
  steps,
});
const sent = (c: Conversation, step: string, campaignId = CAMPAIGN): SendRecorded =>
  sendRecordedEvent({
    correlationId: c.candidateKey,
    campaignId,
    candidateKey: c.candidateKey,
    step,
    conversationId: c.sendsNameIt ? c.conversationId : null,
  });
const scheduled = (c: Conversation, stepId: string, dueAt: number): NextStepScheduled => ({
  type: 'NextStepScheduled',
  ...envelope(c, 'planner'),
  stepId,
  dueAt,
});
const replied = (c: Conversation): MessageReceived => ({
  type: 'MessageReceived',
  ...envelope(c, 'agent'),
  messageId: null,
});
const cancelled = (c: Conversation, stepId: string): StepCancelled => ({
  type: 'StepCancelled',
  ...envelope(c, 'planner'),
  stepId,
  reason: 'candidate replied',
});
const closedBy = (c: Conversation, reason: string): ConversationClosed => ({
  type: 'ConversationClosed',
  ...envelope(c, 'agent'),
  reason,
});

/** What each conversation of the campaign does, phase by phase (the planner, the sender, the candidate, the agent). */
type Kind =
  | 'finished-one-step' // sent, no reply: closed
  | 'finished-three-steps' // sent in full over three steps, no reply: closed
  | 'replied-mid-sequence' // replied after the first step, the follow-up cancelled, the agent closes
  | 'replied-answered' // replied after the last step, the agent schedules a call
  | 'replied-closed' // replied after the last step, the agent closes
  | 'in-progress' // the follow-up is scheduled for later
  | 'planted-unanswered' // replied after the last step, nobody answers: no_next_step
  | 'planted-overdue' // the follow-up is due and never sent: next_step_overdue
  | 'planted-dropped'; // the first of two steps sent, nothing scheduled (seed 003): no_next_step

function kindOf(i: number): Kind {
  if (i < 5) return 'planted-unanswered';
  if (i < 10) return 'planted-overdue';
  if (i < 15) return 'planted-dropped';
  if (i < 115) return 'finished-one-step';
  if (i < 175) return 'finished-three-steps';
  if (i < 375) return 'replied-mid-sequence';
  if (i < 575) return 'replied-answered';
  if (i < 775) return 'replied-closed';
  return 'in-progress';
}

const PLANS: Record<Kind, string[]> = {
  'finished-one-step': ['intro'],
  'finished-three-steps': ['intro', 'nudge', 'last'],
  'replied-mid-sequence': ['intro', 'nudge'],
  'replied-answered': ['intro'],
  'replied-closed': ['intro'],
  'in-progress': ['intro', 'nudge'],
  'planted-unanswered': ['intro'],
  'planted-overdue': ['intro', 'nudge'],
  'planted-dropped': ['intro', 'nudge'],
};

/** The events of phase `p` (0-based) for conversation `c` of kind `k`; `now` is the wall clock at the phase. */
function phase(p: number, k: Kind, c: Conversation, now: number): OutreachEvent[] {
  if (p === 0) return [planned(c, ...PLANS[k])];
  if (p === 1) return [sent(c, 'intro')];
  switch (k) {
    case 'finished-three-steps':
      return (
        [
          [scheduled(c, 'nudge', now + 1_000)],
          [sent(c, 'nudge')],
          [scheduled(c, 'last', now + 1_000)],
          [sent(c, 'last')],
        ][p - 2] ?? []
      );
    case 'replied-mid-sequence':
      return (
        [
          [scheduled(c, 'nudge', now + FAR), replied(c)],
          [cancelled(c, 'nudge'), closedBy(c, 'hired')],
        ][p - 2] ?? []
      );
    case 'replied-answered':
      return [[replied(c)], [scheduled(c, 'call', now + FAR)]][p - 2] ?? [];
    case 'replied-closed':
      return [[replied(c)], [closedBy(c, 'not interested')]][p - 2] ?? [];
    case 'in-progress':
      return p === 2 ? [scheduled(c, 'nudge', now + FAR)] : [];
    case 'planted-unanswered':
      return p === 2 ? [replied(c)] : [];
    case 'planted-overdue':
      return p === 2 ? [scheduled(c, 'nudge', now + 1_000)] : [];
    case 'finished-one-step':
    case 'planted-dropped':
      return [];
    default: {
      const exhaustive: never = k;
      throw new Error(`unknown kind ${String(exhaustive)}`);
    }
  }
}

/** Events projected, not counting the closes the sweep publishes (they come back through the topic too). */
async function storedEvents(env: ServiceTestEnv): Promise<number> {
  const [row] = await env.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM conversation_events
     WHERE NOT (event_type = 'ConversationClosed' AND payload ->> 'reason' = 'sequence_completed')`,
  );
  return row?.n ?? 0;
}

describe('conversations end', () => {
  it('1,000 conversations run to completion: after the window, exactly the planted stalls are flagged and exactly the finished sequences without a reply are closed', async () => {
    t = await livenessEnv(DEFAULTS);
    const app = await t.startApp();
    // A second instance: it projects its share of the partitions and sweeps too.
    await t.startApp();
    const put = await app.inject({
      method: 'PUT',
      url: `/v1/campaigns/${CAMPAIGN}/graces`,
      headers: auth,
      payload: GRACES,
    });
    expect(put.statusCode, put.body).toBe(200);

    const all = Array.from({ length: 1_000 }, (_, i) => ({ c: conversation(i), k: kindOf(i) }));
    const idsOf = (pick: (k: Kind) => boolean) =>
      all
        .filter(({ k }) => pick(k))
        .map(({ c }) => c.conversationId)
        .sort();
    const planted = new Map<string, string>(
      all.flatMap(({ c, k }) =>
        k === 'planted-overdue'
          ? [[c.conversationId, 'next_step_overdue']]
          : k.startsWith('planted-')
            ? [[c.conversationId, 'no_next_step']]
            : [],
      ),
    );
    const finished = idsOf((k) => k === 'finished-one-step' || k === 'finished-three-steps');

    // Phase by phase, as the services would: each published once the previous one is projected,
    // so a conversation's events reach the fold in the order they happened.
    let published = 0;
    let lastPublishedAt = 0;
    for (let p = 0; p < 6; p++) {
      const now = Date.now();
      const events = all.flatMap(({ c, k }) => phase(p, k, c, now));
      if (events.length === 0) continue;
      await t.publish(
        'sendRecorded',
        events.filter((e) => e.type === 'SendRecorded'),
      );
      await t.publish(
        'conversationEvents',
        events.filter((e) => e.type !== 'SendRecorded'),
      );
      lastPublishedAt = Date.now();
      published += events.length;
      const expected = published;
      await waitFor(async () => (await storedEvents(t as ServiceTestEnv)) >= expected, {
        timeoutMs: 60_000,
        description: `phase ${p + 1} projected (${expected} events)`,
      });
    }
    // Sends that named no conversation were filed under the one that planned their step.
    expect(await t.query(`SELECT count(*)::int AS n FROM conversations`)).toEqual([{ n: 1_000 }]);

    // After the window: every deadline of the campaign has passed, and the sweepers ran since.
    const window = Math.max(...Object.values(GRACES)) + 1_000;
    await waitFor(() => Date.now() > lastPublishedAt + window, {
      timeoutMs: window + 5_000,
      description: 'every window to pass',
    });
    const sweeps = await sweepsDone(app);
    await waitFor(async () => (await sweepsDone(app)) >= sweeps + 3, {
      timeoutMs: 20_000,
      description: '3 more sweeps',
    });
    // The closes come back as conversation events and are folded.
    await waitFor(
      async () =>
        (await t!.query(`SELECT 1 FROM conversations WHERE status = 'closed' AND closed_reason = 'sequence_completed'`))
          .length >= finished.length,
      { timeoutMs: 30_000, description: 'the closes folded back' },
    );

    const flagged = await t.query<{ conversationId: string; reason: string; count: number }>(
      `SELECT conversation_id AS "conversationId", stalled_reason AS reason, stall_count AS count
       FROM conversations WHERE stalled_reason IS NOT NULL ORDER BY conversation_id`,
    );
    expect(flagged).toEqual(
      [...planted.entries()].sort().map(([conversationId, reason]) => ({ conversationId, reason, count: 1 })),
    );
    const closedRows = await t.query<{ conversationId: string }>(
      `SELECT conversation_id AS "conversationId" FROM conversations
       WHERE status = 'closed' AND closed_reason = 'sequence_completed' ORDER BY conversation_id`,
    );
    expect(closedRows.map((r) => r.conversationId)).toEqual(finished);
    // The others that ended were closed by their agent, with their reason; the rest are open, and none owes anything overdue.
    expect(
      await t.query(
        `SELECT status, closed_reason AS reason, count(*)::int AS n FROM conversations
         WHERE stalled_reason IS NULL GROUP BY 1, 2 ORDER BY 1, 2`,
      ),
    ).toEqual([
      { status: 'closed', reason: 'hired', n: 200 },
      { status: 'closed', reason: 'not interested', n: 200 },
      { status: 'closed', reason: 'sequence_completed', n: finished.length },
      { status: 'open', reason: null, n: 1_000 - 15 - 400 - finished.length },
    ]);

    // On the topics: one ConversationStalled per planted stall and one ConversationClosed per
    // finished sequence, each once, however many instances swept.
    const stalls = (await readTopic(t.kafka, t.topic('liveness'), (m) => m.length >= planted.size)).map(
      (m) => eventCodec.decode(m.value as Buffer) as ConversationStalled,
    );
    expect(stalls.map((e) => [e.type, e.conversationId]).sort()).toEqual(
      [...planted.keys()].sort().map((id) => ['ConversationStalled', id]),
    );
    const closes = (
      await readTopic(
        t.kafka,
        t.topic('conversationEvents'),
        (m) => m.filter((x) => x.headers['event-type'] === 'ConversationClosed').length >= 400 + finished.length,
      )
    )
      .map((m) => eventCodec.decode(m.value as Buffer))
      .filter((e): e is ConversationClosed => e.type === 'ConversationClosed' && e.producer === 'liveness');
    expect(closes.map((e) => e.conversationId).sort()).toEqual(finished);
    expect(closes.every((e) => e.reason === 'sequence_completed' && e.campaignId === CAMPAIGN)).toBe(true);

    // The stalled list holds only real stalls; the counters agree.
    const list = (
      await app.inject({ url: `/v1/conversations/stalled?campaignId=${CAMPAIGN}&limit=500`, headers: auth })
    ).json() as { conversations: Array<{ conversationId: string }> };
    expect(list.conversations.map((c) => c.conversationId).sort()).toEqual([...planted.keys()].sort());
    const metrics = (await app.inject({ url: '/metrics' })).body;
    expect(metrics).toMatch(/outreach_liveness_stalled_conversations\{[^}]*reason="no_next_step"[^}]*\} 10/);
    expect(metrics).toMatch(/outreach_liveness_stalled_conversations\{[^}]*reason="next_step_overdue"[^}]*\} 5/);
  });

  it('files a send that names no conversation under the conversation that planned its step, also when the plan comes later, and a rebuild agrees', async () => {
    t = await livenessEnv(DEFAULTS);
    const app = await t.startApp();
    const unnamed = (c: Omit<Conversation, 'sendsNameIt'>): Conversation => ({ ...c, sendsNameIt: false });
    // One candidate, two conversations of its own, one step each; a third step nobody planned.
    const first = unnamed({ candidateKey: 'dana', conversationId: 'thread-a' });
    const second = unnamed({ candidateKey: 'dana', conversationId: 'thread-b' });
    const fallback = unnamed({ candidateKey: 'dana', conversationId: `${CAMPAIGN}:dana` });
    // A late plan: its send is recorded before the plan is.
    const late = unnamed({ candidateKey: 'eli', conversationId: 'thread-late' });
    const lateDefault = `${CAMPAIGN}:eli`;

    await t.publish('conversationEvents', [planned(first, 'intro'), planned(second, 'follow-up')]);
    await waitFor(async () => (await storedEvents(t as ServiceTestEnv)) === 2, {
      timeoutMs: 30_000,
      description: 'the plans projected',
    });
    // The campaign id as an agent might spell it: the send's conversation is found under the canonical one.
    await t.publish('sendRecorded', [
      sent(first, 'intro', ' Camp-End'),
      sent(second, 'follow-up'),
      sent(fallback, 'other'),
      sent(late, 'intro'),
    ]);
    await waitFor(async () => (await storedEvents(t as ServiceTestEnv)) === 6, {
      timeoutMs: 30_000,
      description: 'the sends projected',
    });
    const conversationOf = async (id: string) => {
      const response = await app.inject({ url: `/v1/conversations/${encodeURIComponent(id)}`, headers: auth });
      return response.statusCode === 200
        ? (response.json() as { awaitingReplySince: string | null; timeline: Array<{ type: string }> })
        : undefined;
    };
    expect((await conversationOf('thread-a'))?.timeline.map((e) => e.type)).toEqual([
      'SequencePlanned',
      'SendRecorded',
    ]);
    expect((await conversationOf('thread-b'))?.timeline.map((e) => e.type)).toEqual([
      'SequencePlanned',
      'SendRecorded',
    ]);
    // Their last planned step was sent: each awaits the reply.
    expect((await conversationOf('thread-a'))?.awaitingReplySince).not.toBeNull();
    expect((await conversationOf(`${CAMPAIGN}:dana`))?.timeline.map((e) => e.type)).toEqual(['SendRecorded']);
    expect((await conversationOf(lateDefault))?.timeline.map((e) => e.type)).toEqual(['SendRecorded']);

    await t.publish('conversationEvents', [planned(late, 'intro')]);
    await waitFor(async () => (await conversationOf(lateDefault)) === undefined, {
      timeoutMs: 30_000,
      description: 'the early send moved to the conversation that planned it',
    });
    expect((await conversationOf('thread-late'))?.timeline.map((e) => e.type)).toEqual([
      'SendRecorded',
      'SequencePlanned',
    ]);
    expect(
      (await t.query<{ id: string }>(`SELECT conversation_id AS id FROM conversations ORDER BY 1`)).map((r) => r.id),
    ).toEqual([`${CAMPAIGN}:dana`, 'thread-a', 'thread-b', 'thread-late']);

    // A rebuild reads both topics from the beginning at its own pace, and files every send alike.
    const result = await rebuildFromLog(t, DEFAULTS);
    expect(result).toMatchObject({ matches: true, conversations: 4, messages: 7, differences: 0 });
  });
});
