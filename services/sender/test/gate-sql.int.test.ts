/**
 * The gate's SQL (adapters/gate-sql.ts, generated from the domain's GATE) on PostgreSQL, with the
 * facts as the tables hold them: for every combination of a suppression, a paused campaign and the
 * kill switch, the fence's and a resume's conditions let a send through exactly when `gateOf` and
 * `holdOf` are null.
 */
import type { IsolatedSchema } from '@outreach/testkit';
import { createHash } from 'node:crypto';
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
  // A suppression on the plain list, or (an erased person's, ADR 014) only as the keyed hash of the
  // address: each suppressed combination is run both ways.
  const cases = everyFacts.flatMap((fact) =>
    fact.suppression === null ? [{ fact, hashed: false }] : [false, true].map((hashed) => ({ fact, hashed })),
  );
  for (const [i, { fact, hashed }] of cases.entries()) {
    const email = `gate-${i}@example.com`;
    const addressHash = createHash('sha256').update(email).digest('hex');
    const campaign = `gate-${i}`;
    if (fact.suppression !== null && !hashed)
      await db.pool.query('INSERT INTO suppressions (email_norm, reason) VALUES ($1, $2)', [email, fact.suppression]);
    if (fact.suppression !== null && hashed)
      await db.pool.query('INSERT INTO suppression_hashes (address_hash, reason) VALUES ($1, $2)', [
        addressHash,
        fact.suppression,
      ]);
    await db.pool.query('INSERT INTO campaigns (campaign_id, paused) VALUES ($1, $2)', [campaign, fact.paused]);
    await db.pool.query('UPDATE sending_control SET paused = $1', [fact.sendingPaused]);
    const { rows } = await db.pool.query<{ gateClear: boolean; holdClear: boolean }>(
      `SELECT ${gateClearSql(facts)} AS "gateClear", ${holdClearSql(facts)} AS "holdClear"
       FROM (SELECT $1::text AS email_norm, $2::text AS campaign_id, $3::text AS address_hash) s`,
      [email, campaign, addressHash],
    );
    expect(rows[0], JSON.stringify({ fact, hashed })).toEqual({
      gateClear: gateOf(fact) === null,
      holdClear: holdOf(fact) === null,
    });
  }
});
