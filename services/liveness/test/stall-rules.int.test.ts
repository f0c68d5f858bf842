/**
 * The stall rules, folded in TypeScript and applied in SQL, agree (issue #19). The rules have one
 * definition (domain `stallRules`), from which the sweep's reason and the grace-change update are
 * generated (adapters/stall-sql.ts); this property checks the generated SQL against the fold on real
 * PostgreSQL: random histories of every event kind (ties in time, log positions, out-of-order and
 * repeated delivery) go through the projection, campaign graces are set before and changed after,
 * the real sweep runs, and every stored deadline, reason and `since` must equal the domain's.
 */
import { createPool, migrate, quoteIdent, uuidV5 } from '@outreach/shared';
import { uniqueName } from '@outreach/shared/testing';
import fc from 'fast-check';
import type { Pool } from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { ConversationsRepository, type ProjectedEvent } from '../src/adapters/conversations-repository.js';
import { migrationsDir } from '../src/app.js';
import {
  deadlines,
  project,
  stallAt,
  stallDeadline,
  type ConversationInput,
  type Graces,
} from '../src/domain/conversation.js';

const databaseUrl = inject('databaseUrl');
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DEFAULTS: Graces = { inboundMs: 15 * MINUTE, outboundMs: 3 * HOUR, overdueMs: HOUR };
const CAMPAIGNS = ['camp-a', 'camp-b'] as const;
const STEPS = ['s1', 's2', 's3'];

let schema: string;
let pool: Pool;
let repository: ConversationsRepository;

beforeAll(async () => {
  schema = uniqueName('liveness_rules');
  await migrate({ databaseUrl, schema, dir: migrationsDir, outbox: true });
  pool = createPool({ connectionString: databaseUrl, applicationName: 'stall-rules-test', schema, max: 2 });
  repository = new ConversationsRepository(pool, 'unused.liveness', DEFAULTS);
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
/** A step's due time is generated as an offset too. */
type GeneratedInput =
  | Exclude<ConversationInput, { type: 'NextStepScheduled' }>
  | { type: 'NextStepScheduled'; stepId: string; dueIn: number };
const input: fc.Arbitrary<GeneratedInput> = fc.oneof(
  fc.constant({ type: 'ConversationStarted' as const }),
  fc.constant({ type: 'MessageReceived' as const }),
  fc.record({ type: fc.constant('NextStepScheduled' as const), stepId: step, dueIn: offset(-6 * HOUR, 6 * HOUR) }),
  fc.record({ type: fc.constant('StepCompleted' as const), stepId: step }),
  fc.record({ type: fc.constant('SendRecorded' as const), step }),
  fc.record({ type: fc.constant('StepCancelled' as const), stepId: step }),
  fc.constant({ type: 'ConversationClosed' as const }),
);
const event = fc.record({
  at: offset(-8 * HOUR, 0),
  input,
  topic: fc.constantFrom('conversation.events.v1', 'outreach.send-recorded.v1'),
  partition: fc.integer({ min: 0, max: 2 }),
  offset: fc.integer({ min: 0, max: 40 }),
  /** Delivery order, independent of event time. */
  arrival: fc.nat(),
});
const graces = fc.record({
  inboundMs: fc.integer({ min: 1, max: 6 * HOUR }),
  outboundMs: fc.integer({ min: 1, max: 6 * HOUR }),
  overdueMs: fc.integer({ min: 0, max: 6 * HOUR }),
});
const run = fc.record({
  conversations: fc.array(
    fc.record({ campaign: fc.constantFrom(...CAMPAIGNS), events: fc.array(event, { minLength: 1, maxLength: 10 }) }),
    { minLength: 1, maxLength: 6 },
  ),
  /** Graces a campaign has before its events arrive (the fold applies them), or the defaults. */
  initial: fc.record({ 'camp-a': fc.option(graces), 'camp-b': fc.option(graces) }),
  /** A grace change after the projection (the generated SQL recomputes the deadlines). */
  change: fc.option(fc.record({ campaign: fc.constantFrom(...CAMPAIGNS), graces })),
  batchSize: fc.integer({ min: 1, max: 8 }),
  redeliver: fc.boolean(),
});

interface Row {
  conversationId: string;
  obligationDeadline: Date | null;
  overdueDeadline: Date | null;
  stallDeadline: Date | null;
  stalledReason: string | null;
  stalledSince: Date | null;
  flaggedAt: Date | null;
}

const ms = (d: Date | null) => (d === null ? null : d.getTime());

it('the sweep and a grace change in SQL agree with the fold on every deadline, reason and since', async () => {
  let runs = 0;
  const reasons = new Set<string>();
  let changedTotal = 0;
  await fc.assert(
    fc.asyncProperty(run, async (r) => {
      runs++;
      await pool.query('TRUNCATE conversations, conversation_events, campaign_graces, outbox');
      const base = await repository.now();
      const effective = new Map<string, Graces>(CAMPAIGNS.map((c) => [c, r.initial[c] ?? DEFAULTS]));
      for (const campaign of CAMPAIGNS) {
        const initial = r.initial[campaign];
        if (initial) await repository.setGraces(campaign, initial);
      }

      const projected: Array<ProjectedEvent & { arrival: number }> = [];
      r.conversations.forEach((c, i) => {
        c.events.forEach((e, k) => {
          const timed: ConversationInput =
            e.input.type === 'NextStepScheduled'
              ? { type: 'NextStepScheduled', stepId: e.input.stepId, dueAt: base + e.input.dueIn }
              : e.input;
          projected.push({
            eventId: uuidV5('stall-rules', String(i), String(k)),
            conversationId: `${c.campaign}:c${i}`,
            campaignId: c.campaign,
            candidateKey: `c${i}`,
            at: base + e.at,
            position: [e.topic, e.partition, e.offset],
            input: timed,
            correlationId: `c${i}`,
            arrival: e.arrival,
          });
        });
      });
      const delivery = [...projected].sort((a, b) => a.arrival - b.arrival);
      for (let from = 0; from < delivery.length; from += r.batchSize) {
        await repository.project(delivery.slice(from, from + r.batchSize));
      }
      if (r.redeliver) await repository.project(delivery);
      if (r.change) {
        changedTotal += await repository.setGraces(r.change.campaign, r.change.graces);
        effective.set(r.change.campaign, r.change.graces);
      }

      const beforeSweep = await repository.now();
      const swept = await repository.sweep(10_000);
      const rows = await pool.query<Row>(
        `SELECT conversation_id AS "conversationId", obligation_deadline AS "obligationDeadline",
                overdue_deadline AS "overdueDeadline", stall_deadline AS "stallDeadline",
                stalled_reason AS "stalledReason", stalled_since AS "stalledSince", flagged_at AS "flaggedAt"
         FROM conversations ORDER BY conversation_id`,
      );
      const flaggedAt = [...new Set(rows.rows.map((row) => ms(row.flaggedAt)).filter((t) => t !== null))];
      expect(flaggedAt.length).toBeLessThanOrEqual(1);
      // The sweep's clock: its flag time (truncated to the millisecond, exact against whole-ms
      // deadlines); when it flagged nothing, the clock read just before it, which the sweep's is no
      // earlier than, so nothing due by then may have stayed unflagged.
      const sweepNow = flaggedAt[0] ?? beforeSweep;
      for (const e of swept) reasons.add(e.reason);

      const actual = rows.rows.map((row) => ({
        conversationId: row.conversationId,
        deadlines: { obligation: ms(row.obligationDeadline), overdue: ms(row.overdueDeadline) },
        stallDeadline: ms(row.stallDeadline),
        stall: row.stalledReason === null ? null : { reason: row.stalledReason, since: ms(row.stalledSince) },
      }));
      const expected = r.conversations
        .map((c, i) => {
          const id = `${c.campaign}:c${i}`;
          const state = project(projected.filter((e) => e.conversationId === id));
          const g = effective.get(c.campaign) as Graces;
          const due = deadlines(state, g);
          return {
            conversationId: id,
            deadlines: due,
            stallDeadline: stallDeadline(due),
            stall: stallAt(state, g, sweepNow),
          };
        })
        .sort((a, b) => (a.conversationId < b.conversationId ? -1 : 1));
      expect(actual).toEqual(expected);
      expect(swept.map((e) => e.conversationId).sort()).toEqual(
        expected.filter((c) => c.stall !== null).map((c) => c.conversationId),
      );
    }),
    { numRuns: 120, seed: 20_261_129 },
  );
  // The property saw what it claims to: flags of both kinds and grace changes applied to open rows.
  expect(runs).toBe(120);
  expect([...reasons].sort()).toEqual(['next_step_overdue', 'no_next_step']);
  expect(changedTotal).toBeGreaterThan(0);
});
