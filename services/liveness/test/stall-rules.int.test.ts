/**
 * The deadline rules, folded in TypeScript and applied in SQL, agree (issues #19, #18). The rules
 * have one definition (domain `deadlineRules`: two stalls and the close of a sequence nobody
 * answered), from which the sweep's verdict and the grace-change update are generated
 * (adapters/stall-sql.ts); this property checks the generated SQL against the fold on real
 * PostgreSQL: random histories of every event kind (plans, closes with and without the sweep's
 * reason, ties in time, log positions, out-of-order and repeated delivery) go through the
 * projection, campaign graces (the reply window included, or left to the default) are set before
 * and changed after, the real sweep runs, and every stored deadline, flag, close and `since` must
 * equal the domain's. Sends that name no conversation are filed by the repository's SQL; the
 * expected filing is computed here, independently: the earliest plan (log order) listing the
 * send's (campaign, candidate, step), else the default conversation, whatever the delivery order.
 */
import { createPool, migrate, quoteIdent } from '@outreach/shared';
import { uuidV5 } from '@outreach/contracts';
import { uniqueName } from '@outreach/testkit';
import fc from 'fast-check';
import type { Pool } from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import {
  ConversationsRepository,
  type GraceSettings,
  type ProjectedEvent,
} from '../src/adapters/conversations-repository.js';
import { migrationsDir } from '../src/app.js';
import {
  deadlines,
  logOrder,
  project,
  stallDeadline,
  verdictAt,
  type ConversationInput,
  type Graces,
} from '../src/domain/conversation.js';
import { projectEvents } from '../src/workflow/projector.js';

const databaseUrl = inject('databaseUrl');
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DEFAULTS: Graces = { inboundMs: 15 * MINUTE, outboundMs: 3 * HOUR, overdueMs: HOUR, replyWindowMs: 2 * HOUR };
const CAMPAIGNS = ['camp-a', 'camp-b'] as const;
const STEPS = ['s1', 's2', 's3'];
const TOPICS = ['conversation.events.v1', 'outreach.send-recorded.v1'] as const;

let schema: string;
let pool: Pool;
let repository: ConversationsRepository;

beforeAll(async () => {
  schema = uniqueName('liveness_rules');
  await migrate({ databaseUrl, schema, dir: migrationsDir, outbox: true });
  pool = createPool({ connectionString: databaseUrl, applicationName: 'stall-rules-test', schema, max: 2 });
  repository = new ConversationsRepository(
    pool,
    { liveness: 'unused.liveness', conversationEvents: 'unused.conversation.events' },
    DEFAULTS,
  );
});

afterAll(async () => {
  await pool?.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  await pool?.end();
});

// Times are offsets from the database clock at the start of a run: deadlines land on both sides of
// the sweep. A few fixed instants make ties in append time (ordered by log position) common.
const offset = (min: number, max: number) =>
  fc.oneof(fc.integer({ min, max }), fc.constantFrom(-3 * HOUR, -HOUR, -20 * MINUTE, -MINUTE));
const step = fc.constantFrom(...STEPS);
/** A step's due time is generated as an offset too; a send may name its conversation or not. */
type GeneratedInput =
  | Exclude<ConversationInput, { type: 'NextStepScheduled' } | { type: 'SendRecorded' }>
  | { type: 'NextStepScheduled'; stepId: string; dueIn: number }
  | { type: 'SendRecorded'; step: string; named: boolean; outcome: 'sent' | 'suppressed' | 'failed' };
const input: fc.Arbitrary<GeneratedInput> = fc.oneof(
  fc.constant({ type: 'ConversationStarted' as const }),
  fc.constant({ type: 'MessageReceived' as const }),
  fc.record({ type: fc.constant('NextStepScheduled' as const), stepId: step, dueIn: offset(-6 * HOUR, 6 * HOUR) }),
  fc.record({ type: fc.constant('StepCompleted' as const), stepId: step }),
  fc.record({
    type: fc.constant('SendRecorded' as const),
    step,
    named: fc.boolean(),
    outcome: fc.constant('sent' as const),
  }),
  fc.record({
    type: fc.constant('SendRecorded' as const),
    step,
    named: fc.boolean(),
    outcome: fc.constantFrom('sent' as const, 'suppressed' as const, 'failed' as const),
  }),
  fc.record({ type: fc.constant('StepCancelled' as const), stepId: step }),
  fc.record({
    type: fc.constant('ConversationClosed' as const),
    reason: fc.constantFrom(null, 'hired', 'sequence_completed'),
  }),
  fc.record({
    type: fc.constant('SequencePlanned' as const),
    steps: fc.shuffledSubarray(STEPS, { minLength: 1, maxLength: 3 }),
  }),
  fc.record({
    type: fc.constant('SequencePlanned' as const),
    steps: fc.shuffledSubarray(STEPS, { minLength: 1, maxLength: 3 }),
  }),
);
const event = fc.record({
  campaign: fc.constantFrom(...CAMPAIGNS),
  /** Candidates shared by several conversations: the default one and two with given ids. */
  candidate: fc.integer({ min: 0, max: 1 }),
  thread: fc.constantFrom(null, 0, 1),
  at: offset(-8 * HOUR, 0),
  input,
  topic: fc.constantFrom(...TOPICS),
  partition: fc.integer({ min: 0, max: 2 }),
  offset: fc.integer({ min: 0, max: 40 }),
  /** Delivery order, independent of event time. */
  arrival: fc.nat(),
});
const graces = fc.record({
  inboundMs: fc.integer({ min: 1, max: 6 * HOUR }),
  outboundMs: fc.integer({ min: 1, max: 6 * HOUR }),
  overdueMs: fc.integer({ min: 0, max: 6 * HOUR }),
  /** Null: the service default. */
  replyWindowMs: fc.option(fc.integer({ min: 1, max: 6 * HOUR })),
});
const run = fc.record({
  events: fc.array(event, { minLength: 1, maxLength: 30, size: 'medium' }),
  /** Graces a campaign has before its events arrive (the fold applies them), or the defaults. */
  initial: fc.record({ 'camp-a': fc.option(graces), 'camp-b': fc.option(graces) }),
  /** A grace change after the projection (the generated SQL recomputes the deadlines). */
  change: fc.option(fc.record({ campaign: fc.constantFrom(...CAMPAIGNS), graces })),
  batchSize: fc.integer({ min: 1, max: 8 }),
  redeliver: fc.boolean(),
});

const effective = (settings: GraceSettings): Graces => ({
  ...settings,
  replyWindowMs: settings.replyWindowMs ?? DEFAULTS.replyWindowMs,
});

/** Where a send that names no conversation belongs: the earliest plan listing its step, else the default. */
function expectedFiling(events: readonly ProjectedEvent[], send: ProjectedEvent): string {
  const owner = events
    .filter(
      (e) =>
        e.input.type === 'SequencePlanned' &&
        e.campaignId === send.campaignId &&
        e.candidateKey === send.candidateKey &&
        e.input.steps.includes(send.routeStep as string),
    )
    .sort(logOrder)[0];
  return owner?.conversationId ?? send.conversationId;
}

interface Row {
  conversationId: string;
  obligationDeadline: Date | null;
  overdueDeadline: Date | null;
  replyDeadline: Date | null;
  stallDeadline: Date | null;
  stalledReason: string | null;
  stalledSince: Date | null;
  flaggedAt: Date | null;
  closedReason: string | null;
  awaitingReplySince: Date | null;
}

const ms = (d: Date | null) => (d === null ? null : d.getTime());

// A passing run takes seconds; a failing one shrinks its counterexample against the database, which takes longer.
it(
  'the sweep and a grace change in SQL agree with the fold on every deadline, flag, close and since, and sends are filed by their plan',
  { timeout: 300_000 },
  async () => {
    let runs = 0;
    const outcomes = new Set<string>();
    let changedTotal = 0;
    let filedByPlan = 0;
    let movedByLatePlan = 0;
    let contested = 0;
    await fc.assert(
      fc.asyncProperty(run, async (r) => {
        runs++;
        await pool.query('TRUNCATE conversations, conversation_events, campaign_graces, planned_steps, outbox');
        const base = await repository.now();
        const settled = new Map<string, Graces>(CAMPAIGNS.map((c) => [c, DEFAULTS]));
        for (const campaign of CAMPAIGNS) {
          const initial = r.initial[campaign];
          if (initial) {
            await repository.setGraces(campaign, initial);
            settled.set(campaign, effective(initial));
          }
        }

        const projected: Array<ProjectedEvent & { arrival: number }> = r.events.map((e, k) => {
          const candidateKey = `c${e.candidate}`;
          const conversationId =
            e.thread === null ? `${e.campaign}:${candidateKey}` : `thread-${e.campaign}-${candidateKey}-${e.thread}`;
          const fields = {
            eventId: uuidV5('stall-rules', String(k)),
            campaignId: e.campaign,
            candidateKey,
            at: base + e.at,
            position: [e.topic, e.partition, e.offset] as const,
            correlationId: candidateKey,
            arrival: e.arrival,
          };
          const i = e.input;
          switch (i.type) {
            case 'NextStepScheduled':
              return { ...fields, conversationId, input: { type: i.type, stepId: i.stepId, dueAt: base + i.dueIn } };
            case 'SendRecorded': {
              // A send that names no conversation is given the default one and filed by its step.
              const input = {
                type: i.type,
                step: i.step,
                ...(i.outcome === 'sent' ? {} : { outcome: i.outcome }),
              };
              return i.named
                ? { ...fields, conversationId, input }
                : { ...fields, conversationId: `${e.campaign}:${candidateKey}`, routeStep: i.step, input };
            }
            default:
              return { ...fields, conversationId, input: i };
          }
        });
        const filed = projected.map((e) =>
          e.routeStep === undefined ? e : { ...e, conversationId: expectedFiling(projected, e) },
        );
        for (const [k, e] of projected.entries()) {
          const { routeStep } = e;
          if (routeStep === undefined) continue;
          const owner = (filed[k] as ProjectedEvent).conversationId;
          const plans = projected.filter(
            (p) =>
              p.input.type === 'SequencePlanned' &&
              p.campaignId === e.campaignId &&
              p.candidateKey === e.candidateKey &&
              p.input.steps.includes(routeStep),
          );
          // Plans of two conversations list the step: the earliest in the log must own it.
          if (new Set(plans.map((p) => p.conversationId)).size > 1) contested++;
          if (owner === e.conversationId) continue;
          filedByPlan++;
          if (plans.some((p) => p.conversationId === owner && p.arrival > e.arrival)) movedByLatePlan++;
        }

        const delivery = [...projected].sort((a, b) => a.arrival - b.arrival);
        for (let from = 0; from < delivery.length; from += r.batchSize) {
          await projectEvents(repository, delivery.slice(from, from + r.batchSize));
        }
        if (r.redeliver) await projectEvents(repository, delivery);
        if (r.change) {
          changedTotal += await repository.setGraces(r.change.campaign, r.change.graces);
          settled.set(r.change.campaign, effective(r.change.graces));
        }

        const beforeSweep = await repository.now();
        const swept = await repository.sweep(10_000);
        const rows = await pool.query<Row>(
          `SELECT conversation_id AS "conversationId", obligation_deadline AS "obligationDeadline",
                overdue_deadline AS "overdueDeadline", reply_deadline AS "replyDeadline", stall_deadline AS "stallDeadline",
                stalled_reason AS "stalledReason", stalled_since AS "stalledSince", flagged_at AS "flaggedAt",
                closed_reason AS "closedReason", awaiting_reply_since AS "awaitingReplySince"
         FROM conversations ORDER BY conversation_id`,
        );
        const sweptAt = [
          ...new Set([...swept.stalled, ...swept.closed].map((e) => e.occurredAt)),
          ...rows.rows.map((row) => ms(row.flaggedAt)).filter((t) => t !== null),
        ];
        expect(new Set(sweptAt).size).toBeLessThanOrEqual(1);
        // The sweep's clock: the time it applied its verdicts (truncated to the millisecond, exact
        // against whole-ms deadlines); when it did nothing, the clock read just before it, which the
        // sweep's is no earlier than, so nothing due by then may have been left alone.
        const sweepNow = sweptAt[0] ?? beforeSweep;
        const closedBySweep = new Set(swept.closed.map((e) => e.conversationId));
        for (const e of [...swept.stalled, ...swept.closed]) outcomes.add(`${e.type}:${e.reason ?? ''}`);

        const actual = rows.rows.map((row) => ({
          conversationId: row.conversationId,
          deadlines: {
            obligation: ms(row.obligationDeadline),
            overdue: ms(row.overdueDeadline),
            reply: ms(row.replyDeadline),
          },
          stallDeadline: ms(row.stallDeadline),
          verdict:
            row.stalledReason !== null
              ? { outcome: 'stall', reason: row.stalledReason, since: ms(row.stalledSince) }
              : closedBySweep.has(row.conversationId)
                ? { outcome: 'close', reason: row.closedReason, since: ms(row.awaitingReplySince) }
                : null,
        }));
        const ids = [...new Set(filed.map((e) => e.conversationId))].sort();
        const expected = ids.map((id) => {
          const timeline = filed.filter((e) => e.conversationId === id);
          const state = project(timeline);
          const g = settled.get((timeline[0] as ProjectedEvent).campaignId) as Graces;
          const due = deadlines(state, g);
          return {
            conversationId: id,
            deadlines: due,
            stallDeadline: stallDeadline(due),
            verdict: verdictAt(state, g, sweepNow),
          };
        });
        expect(actual).toEqual(expected);
        expect(swept.stalled.map((e) => e.conversationId).sort()).toEqual(
          expected.filter((c) => c.verdict?.outcome === 'stall').map((c) => c.conversationId),
        );
        expect([...closedBySweep].sort()).toEqual(
          expected.filter((c) => c.verdict?.outcome === 'close').map((c) => c.conversationId),
        );
      }),
      { numRuns: 120, seed: 20_261_129 },
    );
    // The property saw what it claims to: flags of both kinds, closes, grace changes applied to open
    // rows, sends filed by a plan, also by one delivered after them, and steps two plans claim.
    expect(runs).toBe(120);
    expect([...outcomes].sort()).toEqual([
      'ConversationClosed:sequence_completed',
      'ConversationStalled:next_step_overdue',
      'ConversationStalled:no_next_step',
    ]);
    expect(changedTotal).toBeGreaterThan(0);
    expect(filedByPlan).toBeGreaterThan(0);
    expect(movedByLatePlan).toBeGreaterThan(0);
    expect(contested).toBeGreaterThan(0);
  },
);
