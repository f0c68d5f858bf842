/**
 * The SQL generated from the domain's stall rules is the SQL the repository wrote by hand before the
 * rules had one definition: the sweep's reason and since token for token, and a grace change's
 * deadlines with the stall deadline folded into the same UPDATE (it was a second one). That it
 * agrees with the fold is test/stall-rules.int.test.ts's property, on PostgreSQL.
 */
import { describe, expect, it } from 'vitest';
import { deadlineAssignmentsSql, stallReasonSql, stallSinceSql } from './stall-sql.js';

const tokens = (sql: string) => sql.replace(/\s+/g, ' ').trim();

describe('stall rule SQL', () => {
  it("the sweep's reason and since: an unmet obligation first, else the overdue step", () => {
    expect(stallReasonSql('c.')).toBe(
      "CASE WHEN c.obligation_deadline <= now() THEN 'no_next_step' ELSE 'next_step_overdue' END",
    );
    expect(stallSinceSql('c.')).toBe(
      'CASE WHEN c.obligation_deadline <= now() THEN c.obligation_since ELSE c.due_at END',
    );
  });

  it('a grace change recomputes both deadlines by kind, and the stall deadline as the earlier', () => {
    const obligation =
      "obligation_since + make_interval(secs => (CASE obligation_kind WHEN 'inbound' THEN $2 ELSE $3 END)::float8 / 1000)";
    const overdue = 'due_at + make_interval(secs => ($4)::float8 / 1000)';
    expect(tokens(deadlineAssignmentsSql({ inboundMs: '$2', outboundMs: '$3', overdueMs: '$4' }))).toBe(
      `obligation_deadline = ${obligation}, overdue_deadline = ${overdue}, stall_deadline = least(${obligation}, ${overdue})`,
    );
  });
});
