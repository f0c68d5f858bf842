import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { uniqueName } from '@outreach/testkit';
import { migrate } from './migrate.js';
import { quoteIdent } from './pool.js';

const databaseUrl = inject('databaseUrl');
const schemas: string[] = [];

afterAll(async () => {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  await client.end();
});

function migrationsDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'migrations-'));
  writeFileSync(
    join(dir, '1764100000000_things.sql'),
    '-- Up Migration\nCREATE TABLE things (id int PRIMARY KEY);\n\n-- Down Migration\nDROP TABLE things;\n',
  );
  return dir;
}

describe('migrate', () => {
  it("creates the service's schema, its own migrations table, the outbox and its parking table, and is a no-op the second time", async () => {
    const schema = uniqueName('svc');
    schemas.push(schema);
    const dir = migrationsDir();
    expect(await migrate({ databaseUrl, schema, dir, outbox: true })).toEqual([
      '1764000000000_outbox',
      '1764100000000_things',
      '1764700000000_outbox_parked',
      '1767200000000_outbox-trace-context',
      '1767300000000_outbox-event-ids',
    ]);
    expect(await migrate({ databaseUrl, schema, dir, outbox: true })).toEqual([]);

    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    const tables = await client.query<{ table_name: string }>(
      'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name',
      [schema],
    );
    await client.end();
    expect(tables.rows.map((r) => r.table_name)).toEqual([
      'outbox',
      'outbox_event_ids',
      'outbox_parked',
      'pgmigrations',
      'things',
    ]);
  });

  it('lets replicas start together: concurrent runs wait for each other and apply once', async () => {
    const schema = uniqueName('svc_race');
    schemas.push(schema);
    const dir = migrationsDir();
    const results = await Promise.all([1, 2, 3].map(() => migrate({ databaseUrl, schema, dir, outbox: true })));
    expect(results.flat().sort()).toEqual([
      '1764000000000_outbox',
      '1764100000000_things',
      '1764700000000_outbox_parked',
      '1767200000000_outbox-trace-context',
      '1767300000000_outbox-event-ids',
    ]);
  });
});
