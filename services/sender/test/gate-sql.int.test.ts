/**
 * The gate's SQL (adapters/gate-sql.ts, generated from the domain's GATE) on PostgreSQL, with the
 * facts as the tables hold them: for every combination of a suppression, a paused campaign and the
 * kill switch, the fence's and a resume's conditions let a send through exactly when `gateOf` and
 * `holdOf` are null.
 */
import type { IsolatedSchema } from '@outreach/testkit';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { gateClearSql, holdClearSql, sendGateFactsSql } from '../src/adapters/gate-sql.js';
import { gateOf, holdOf, type SendFacts } from '../src/domain/send.js';
import { migratedSenderSchema } from './harness.js';

const databaseUrl = inject('databaseUrl');
let db: IsolatedSchema;
beforeAll(async () => {
  db = await migratedSenderSchema(databaseUrl, 'sender_gate_sql');
});
afterAll(() => db?.drop());

const everyFacts: SendFacts[] = [null, 'manual'].flatMap((suppression) =>
  [false, true].flatMap((paused) => [false, true].map((sendingPaused) => ({ suppression, paused, sendingPaused }))),
);

it('the generated gate agrees with gateOf and holdOf on every combination of facts', async () => {
  const facts = sendGateFactsSql('s');
  for (const [i, fact] of everyFacts.entries()) {
    const email = `gate-${i}@example.com`;
    const campaign = `gate-${i}`;
    if (fact.suppression !== null)
      await db.pool.query('INSERT INTO suppressions (email_norm, reason) VALUES ($1, $2)', [email, fact.suppression]);
    await db.pool.query('INSERT INTO campaigns (campaign_id, paused) VALUES ($1, $2)', [campaign, fact.paused]);
    await db.pool.query('UPDATE sending_control SET paused = $1', [fact.sendingPaused]);
    const { rows } = await db.pool.query<{ gateClear: boolean; holdClear: boolean }>(
      `SELECT ${gateClearSql(facts)} AS "gateClear", ${holdClearSql(facts)} AS "holdClear"
       FROM (SELECT $1::text AS email_norm, $2::text AS campaign_id) s`,
      [email, campaign],
    );
    expect(rows[0], JSON.stringify(fact)).toEqual({
      gateClear: gateOf(fact) === null,
      holdClear: holdOf(fact) === null,
    });
  }
});
