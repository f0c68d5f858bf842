/**
 * The gate's SQL generated from the domain's GATE, spelled out, and evaluated on every combination
 * of facts against `gateOf` and `holdOf` (the facts given as SQL literals). That the real fact reads
 * agree too, on PostgreSQL, is test/gate-sql.int.test.ts's property.
 */
import { describe, expect, it } from 'vitest';
import { gateOf, holdOf, type GateFact, type SendFacts } from '../domain/send.js';
import { gateClearSql, holdClearSql, sendGateFactsSql, type GateFactsSql } from './gate-sql.js';

const tokens = (sql: string) => sql.replace(/\s+/g, ' ').trim();

/** Every combination of the gate's facts: suppressed or not, campaign paused or not, switch on or off. */
const everyFacts: SendFacts[] = [null, 'manual'].flatMap((suppression) =>
  [false, true].flatMap((paused) => [false, true].map((sendingPaused) => ({ suppression, paused, sendingPaused }))),
);

/** The facts as SQL literals. */
function literals(facts: SendFacts): GateFactsSql {
  const sql = (holds: boolean) => (holds ? 'TRUE' : 'FALSE');
  return {
    suppression: sql(facts.suppression !== null),
    paused: sql(facts.paused),
    sendingPaused: sql(facts.sendingPaused),
  };
}

/** Evaluates a conjunction of negated literals, the only form the generator emits. */
function evaluate(sql: string): boolean {
  return sql.split(' AND ').every((term) => {
    const match = /^NOT (TRUE|FALSE)$/.exec(term);
    if (!match) throw new Error(`not a negated literal: ${term}`);
    return match[1] === 'FALSE';
  });
}

describe('gate SQL', () => {
  it('the fence lets a send through when no rule of GATE holds, in its order', () => {
    const facts: Record<GateFact, string> = { suppression: 's', paused: 'p', sendingPaused: 'k' };
    expect(gateClearSql(facts)).toBe('NOT s AND NOT p AND NOT k');
    expect(holdClearSql(facts)).toBe('NOT p AND NOT k');
  });

  it("reads each fact from the send row's suppression, campaign and the kill switch", () => {
    expect(tokens(gateClearSql(sendGateFactsSql('sends')))).toBe(
      'NOT EXISTS (SELECT 1 FROM suppressions sup WHERE sup.email_norm = sends.email_norm) AND ' +
        'NOT EXISTS (SELECT 1 FROM suppression_hashes suh WHERE suh.address_hash = sends.address_hash) AND ' +
        'NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.campaign_id = sends.campaign_id AND c.paused) AND ' +
        'NOT (SELECT ctl.paused FROM sending_control ctl)',
    );
  });

  it('negates a fact given as alternatives term by term (anti-joins), never as NOT of an OR', () => {
    const facts: GateFactsSql = { suppression: ['s1', 's2'], paused: 'p', sendingPaused: 'k' };
    expect(gateClearSql(facts)).toBe('NOT s1 AND NOT s2 AND NOT p AND NOT k');
    expect(gateClearSql(sendGateFactsSql('sends'))).not.toMatch(/\bOR\b/);
  });

  it.each(everyFacts)('agrees with gateOf and holdOf on %o', (facts) => {
    expect(evaluate(gateClearSql(literals(facts)))).toBe(gateOf(facts) === null);
    expect(evaluate(holdClearSql(literals(facts)))).toBe(holdOf(facts) === null);
  });
});
