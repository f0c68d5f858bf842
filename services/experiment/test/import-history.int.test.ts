/**
 * Importing pre-platform variant history (seed 000-3 step 1 on an incident's own data), against
 * the real database and broker: the CLI imports a file, the count shows a candidate seen in both
 * arms (from history alone, and from history against a platform assignment), the same file again
 * changes nothing, and bad files (an address as candidate id, a huge line, wrong types, unknown
 * arms, invalid UTF-8) are refused by line number with nothing written and no value echoed.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventCodec, type VariantContaminated } from '@outreach/contracts';
import { readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
// The app's `experiments` repository (its type is declared with the plugin).
import type {} from '../src/plugins/experiment.js';
import { importHistory } from '../src/workflow/import-history.js';
import { auth, experimentEnv, replayFromLog, sendRecorded } from './experiment-env.js';

const root = join(import.meta.dirname, '..', '..', '..');
let t: ServiceTestEnv;
let dir: string | undefined;
afterEach(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
  await t?.cleanup();
});

function file(name: string, content: string | Buffer): string {
  dir ??= mkdtempSync(join(tmpdir(), 'experiment-history-'));
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

function cli(path: string, ...args: string[]) {
  const run = spawnSync(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      join(root, 'node_modules/tsx/dist/loader.mjs'),
      join(root, 'services/experiment/src/cli/import-history.ts'),
      '--file',
      path,
      ...args,
    ],
    {
      env: { PATH: process.env.PATH, DATABASE_URL: t.databaseUrl, DATABASE_SCHEMA: t.schema, TOPIC_PREFIX: t.prefix },
      encoding: 'utf8',
    },
  );
  return { status: run.status, out: `${run.stdout}${run.stderr}` };
}

async function setUp(): Promise<FastifyInstance> {
  t = await experimentEnv();
  const app = await t.startApp();
  const created = await app.inject({
    method: 'POST',
    url: '/v1/experiments',
    headers: auth,
    payload: {
      experimentId: 'legacy',
      salt: 'legacy-test-salt',
      variants: [
        { name: 'A', weight: 1 },
        { name: 'B', weight: 1 },
      ],
    },
  });
  expect(created.statusCode).toBe(201);
  return app;
}

const snapshot = async () => ({
  exposures: await t.query('SELECT * FROM exposure_events ORDER BY event_id'),
  contaminations: await t.query('SELECT * FROM contaminations ORDER BY candidate_key'),
  imports: await t.query('SELECT * FROM exposure_imports'),
  outbox: await t.query('SELECT event_id FROM outbox ORDER BY event_id'),
  assignments: await t.query('SELECT * FROM assignments ORDER BY candidate_key'),
});

describe('importing pre-platform variant history', () => {
  it('counts candidates seen in both arms, from history and against platform assignments; the same file again changes nothing', async () => {
    const app = await setUp();
    const platform = (
      await app.inject({ method: 'PUT', url: '/v1/experiments/legacy/assignments/p1', headers: auth })
    ).json().variant as string;
    const other = platform === 'A' ? 'B' : 'A';
    const history = file(
      'history.csv',
      [
        'candidate,experiment,variant,time,source,notes',
        'h1,legacy,A,2025-01-01T10:00:00Z,old-mailer,first send',
        'h1,legacy,B,2025-01-02T10:00:00Z,old-mailer,"re-run, other arm"',
        'h2,legacy,A,2025-01-01T10:00:00Z,old-mailer,',
        'h2,legacy,A,2025-01-01T11:00:00+01:00,old-mailer,the same exposure again',
        `p1,legacy,${other},2025-01-01T12:00:00Z,,`,
        '',
        'h3,legacy,B,2025-01-03 10:00:00+01:00,old-mailer,',
      ].join('\r\n') + '\r\n',
    );

    const first = cli(history);
    expect(first.status, first.out).toBe(0);
    expect(first.out).toMatch(/: 8 lines, 5 exposures, 5 new, 1 duplicate lines counted once, 2 contaminations found/);
    expect(first.out).toMatch(/experiment legacy: 2 candidates seen in more than one arm \(2 with imported history\)/);
    expect(
      await t.query(
        `SELECT candidate_key, exposed_variants, assigned_variant FROM contaminations ORDER BY candidate_key`,
      ),
    ).toEqual([
      { candidate_key: 'h1', exposed_variants: ['A', 'B'], assigned_variant: null },
      { candidate_key: 'p1', exposed_variants: [other], assigned_variant: platform },
    ]);
    expect(
      await t.query(`SELECT count(*)::int AS n FROM exposure_events WHERE source = 'import' AND origin = 'old-mailer'`),
    ).toEqual([{ n: 4 }]);

    const report = (await app.inject({ url: '/v1/experiments/legacy/report', headers: auth })).json();
    expect(report.contamination).toEqual({ candidates: 2, withImportedHistory: 2, listed: 2 });
    // Clean imported history shows per arm; contaminated candidates are excluded as always.
    expect(report.variants).toEqual([
      { variant: 'A', assigned: 0, exposedCandidates: 0, exposures: 0, importedCandidates: 1, importedExposures: 1 },
      { variant: 'B', assigned: 0, exposedCandidates: 0, exposures: 0, importedCandidates: 1, importedExposures: 1 },
    ]);

    // The findings go out as VariantContaminated, through the outbox the service's relay drains.
    const published = await readTopic(
      t.kafka,
      t.topic('assignments'),
      (m) => m.filter((x) => x.headers['event-type'] === 'VariantContaminated').length >= 2,
    );
    const contaminated = published
      .filter((m) => m.headers['event-type'] === 'VariantContaminated')
      .map((m) => eventCodec.decode(m.value as Buffer) as VariantContaminated);
    expect(contaminated.map((e) => e.candidateKey).sort()).toEqual(['h1', 'p1']);
    expect(contaminated.every((e) => e.correlationId.startsWith('import:'))).toBe(true);

    const before = await snapshot();
    const again = cli(history);
    expect(again.status, again.out).toBe(0);
    expect(again.out).toMatch(/this file was imported at .*; nothing changed/);
    expect(again.out).toMatch(/experiment legacy: 2 candidates seen in more than one arm/);
    expect(await snapshot()).toEqual(before);

    // Another file repeating those lines adds only what is new: exposures are named by content.
    const overlapping = file(
      'more.ndjson',
      [
        JSON.stringify({ candidate: 'h2', experiment: 'legacy', variant: 'A', time: '2025-01-01T10:00:00Z' }),
        JSON.stringify({ candidate: 'h2', experiment: 'legacy', variant: 'B', time: '2025-01-04T10:00:00Z' }),
      ].join('\n'),
    );
    const more = await importHistory(app.experiments, { file: overlapping, format: 'ndjson', now: new Date() });
    expect(more).toMatchObject({ kind: 'imported', exposures: 2, newExposures: 1, newlyContaminated: 1 });
    expect(more.kind !== 'refused' && more.contamination).toEqual([
      { experimentId: 'legacy', candidates: 3, withImportedHistory: 3 },
    ]);
    expect(await t.query('SELECT 1 FROM exposure_imports')).toHaveLength(2);

    // A candidate with imported history in one arm whom the platform later sends the other arm is
    // found at that send: the one rule runs over both sources.
    await t.publish('sendRecorded', [
      sendRecorded({ experimentId: 'legacy', candidateKey: 'h3', variant: 'A', step: 'intro' }),
    ]);
    await waitFor(async () => (await t.query(`SELECT 1 FROM contaminations WHERE candidate_key = 'h3'`)).length === 1, {
      timeoutMs: 30_000,
      description: 'the platform send to h3 to be found contaminated',
    });
    expect((await app.inject({ url: '/v1/experiments/legacy/report', headers: auth })).json().contamination).toEqual({
      candidates: 4,
      withImportedHistory: 4,
      listed: 4,
    });

    // Imported history is not in the log: the replay compares the exposures from SendRecorded only.
    const replay = await replayFromLog(t, { timeoutMs: 10_000 });
    expect(replay.messages).toBe(1);
    expect(replay.live).toEqual([{ experimentId: 'legacy', variant: 'A', exposures: 1, candidates: 1 }]);
    expect(replay.matches).toBe(true);
  });

  it('refuses a file with bad lines by line number, naming fields and never values, and writes nothing', async () => {
    await setUp();
    const before = await snapshot();
    const huge = `huge-${'x'.repeat(8 * 1024 * 1024)}`;
    const bad = file(
      'bad.csv',
      Buffer.concat([
        Buffer.from(
          [
            '\ufeffcandidate,experiment,variant,time',
            'ada@leak.example,legacy,A,2025-01-01T10:00:00Z',
            `${huge},legacy,A,2025-01-01T10:00:00Z`,
            'c3,legacy,A',
            'c4,nope,A,2025-01-01T10:00:00Z',
            'c5,legacy,C,2025-01-01T10:00:00Z',
            'c6,legacy,A,01/02/2025 10:00',
            'c7,legacy,A,2025-01-01T10:00:00Z',
            'c8,"legacy,A,2025-01-01T10:00:00Z',
            'ada%40leak.example,legacy,B,2099-01-01T10:00:00Z',
            '',
          ].join('\n'),
        ),
        Buffer.from([0x63, 0x39, 0x2c, 0xff, 0xfe, 0x0a]), // line 11: "c9," and bytes that are not UTF-8
      ]),
    );
    const refused = cli(bad);
    expect(refused.status, refused.out).toBe(1);
    expect(refused.out).not.toMatch(/ada|leak|xxxx/);
    const lines = refused.out.split('\n').map((l) => l.trim());
    expect(lines).toEqual(
      expect.arrayContaining([
        'refused: 9 invalid of 11 lines; nothing was imported',
        'line 2: candidate must not contain an at-sign (ids travel on topics free of addresses)',
        'line 3: is longer than 4096 bytes',
        'line 4: has 3 fields where the header has 4',
        'line 5: experiment names no experiment on the platform (create it first, e.g. with status stopped)',
        "line 6: variant is not one of the experiment's variants",
        'line 7: time is not an ISO 8601 date and time with an offset (2025-03-01T09:30:00Z)',
        'line 9: has an unterminated or stray quote',
        'line 10: candidate must not contain an at-sign (ids travel on topics free of addresses)',
        'line 10: time is in the future',
        'line 11: is not valid UTF-8',
      ]),
    );
    expect(refused.out).not.toMatch(/line 8:/);
    expect(await snapshot()).toEqual(before);

    // NDJSON with the wrong types: refused the same way.
    const types = file(
      'types.ndjson',
      [
        JSON.stringify({ candidate: 12345, experiment: 'legacy', variant: 'A', time: '2025-01-01T10:00:00Z' }),
        JSON.stringify({ candidate: 'c2', experiment: 'legacy', variant: ['A'], time: 1_735_725_600_000 }),
        '["c3","legacy","A","2025-01-01T10:00:00Z"]',
        '{"candidate": "c4", ',
      ].join('\n'),
    );
    const typed = cli(types);
    expect(typed.status, typed.out).toBe(1);
    expect(typed.out).toMatch(/line 1: candidate must be a string/);
    expect(typed.out).toMatch(/line 2: variant must be a string\n\s*line 2: time must be a string/);
    expect(typed.out).toMatch(/line 3: is not a JSON object/);
    expect(typed.out).toMatch(/line 4: is not valid JSON/);

    // A header that lacks a column, and a file with nothing in it.
    expect(cli(file('noheader.csv', 'c1,legacy,A,2025-01-01T10:00:00Z\n')).out).toMatch(
      /line 1: the header has no candidate column/,
    );
    expect(cli(file('empty.csv', 'candidate,experiment,variant,time\n')).out).toMatch(/the file holds no exposures/);
    expect(cli(file('history.txt', 'x')).status).toBe(2);
    expect(await snapshot()).toEqual(before);
  });
});
