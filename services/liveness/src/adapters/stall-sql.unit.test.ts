/**
 * The SQL generated from the domain's deadline rules, spelled out: the sweep's verdict (outcome,
 * reason and since, in priority order) and a grace change's deadlines with the stall deadline in
 * the same UPDATE. That it agrees with the fold is test/stall-rules.int.test.ts's property, on
 * PostgreSQL.
 */
import { describe, expect, it } from 'vitest';
import { deadlineAssignmentsSql, sweepVerdictSql } from './stall-sql.js';

const tokens = (sql: string) => sql.replace(/\s+/g, ' ').trim();

describe('deadline rule SQL', () => {
  it("the sweep's verdict: an unmet obligation first, else the overdue step, else the end of the reply window", () => {
    const when = (a: string, b: string, c: string) =>
      `CASE WHEN c.obligation_deadline <= now() THEN ${a} WHEN c.overdue_deadline <= now() THEN ${b} ELSE ${c} END`;
    expect(sweepVerdictSql('c.')).toEqual({
      outcome: when("'stall'", "'stall'", "'close'"),
      reason: when("'no_next_step'", "'next_step_overdue'", "'sequence_completed'"),
      since: when('c.obligation_since', 'c.due_at', 'c.awaiting_reply_since'),
    });
  });

  it('a grace change recomputes every deadline by kind, and the stall deadline as the earliest', () => {
    const obligation =
      "obligation_since + make_interval(secs => (CASE obligation_kind WHEN 'inbound' THEN $2 ELSE $3 END)::float8 / 1000)";
    const overdue = 'due_at + make_interval(secs => ($4)::float8 / 1000)';
    const reply = 'awaiting_reply_since + make_interval(secs => ($5)::float8 / 1000)';
    expect(
      tokens(deadlineAssignmentsSql({ inboundMs: '$2', outboundMs: '$3', overdueMs: '$4', replyWindowMs: '$5' })),
    ).toBe(
      `obligation_deadline = ${obligation}, overdue_deadline = ${overdue}, reply_deadline = ${reply}, ` +
        `stall_deadline = least(${obligation}, ${overdue}, ${reply})`,
    );
  });
});
