/**
 * The SQL forms of the gate (domain/send.ts `GATE`), generated from its rules so the set-based
 * statements (the fence's Fenced, a resume's Resumed) let through exactly the sends `gateOf` and
 * `holdOf` let through. Only how each fact is read from the tables is written here.
 */
import { GATE, type GateFact, type GateRule } from '../domain/send.js';

/**
 * Each gate fact as a boolean SQL expression (true when it holds), or as a list of expressions of
 * which any holding makes it hold. A list is negated term by term (`NOT a AND NOT b`), never as
 * `NOT (a OR b)`: PostgreSQL turns a NOT EXISTS standing alone in a WHERE's conjunction into an
 * anti-join, but evaluates EXISTS under an OR as a subplan per row. The bench measured the fence at
 * 2.6 times its cost with the suppression fact spelled as an OR (6.5 s against 2.5 s of execution per
 * 50,000 sends; about 60 µs of PostgreSQL's CPU per send).
 */
export type GateFactsSql = Readonly<Record<GateFact, string | readonly string[]>>;

/**
 * The facts of the send row `row` (a table name or alias, as `sends`), read from the suppression
 * list (plain, and the erased people's hashes), the campaign and the kill switch. Reading the switch holds a lock on its table until the
 * transaction ends, which a change of the switch waits for (KillSwitch).
 */
export function sendGateFactsSql(row: string): GateFactsSql {
  return {
    // The plain list by address, or an erased person's objection by the claim's own keyed hash (ADR 014).
    suppression: [
      `EXISTS (SELECT 1 FROM suppressions sup WHERE sup.email_norm = ${row}.email_norm)`,
      `EXISTS (SELECT 1 FROM suppression_hashes suh WHERE suh.address_hash = ${row}.address_hash)`,
    ],
    paused: `EXISTS (SELECT 1 FROM campaigns c WHERE c.campaign_id = ${row}.campaign_id AND c.paused)`,
    sendingPaused: `(SELECT ctl.paused FROM sending_control ctl)`,
  };
}

function noneHolds(rules: readonly GateRule[], facts: GateFactsSql): string {
  return rules
    .flatMap((rule) => {
      const fact = facts[rule.fact];
      return (typeof fact === 'string' ? [fact] : fact).map((expression) => `NOT ${expression}`);
    })
    .join(' AND ');
}

/** True where `gateOf` is null: no rule of GATE stops the send. */
export function gateClearSql(facts: GateFactsSql): string {
  return noneHolds(GATE, facts);
}

/** True where `holdOf` is null: no Held rule of GATE holds the send. */
export function holdClearSql(facts: GateFactsSql): string {
  return noneHolds(
    GATE.filter((rule) => rule.stop === 'Held'),
    facts,
  );
}
