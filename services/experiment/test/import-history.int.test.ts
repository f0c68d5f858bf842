/**
 * Importing pre-platform variant history (seed 000-3 step 1 on an incident's own data), against
 * the real database and broker: the CLI imports a file, the count shows a candidate seen in both
 * arms (from history alone, and from history against a platform assignment), each candidate's
 * sticky assignment is seeded with the arm its history saw first (what the platform then answers;
 * a stored assignment or another experiment's group membership is kept), the same file again
 * changes nothing, and bad files (an address as candidate id, a huge line, wrong types, unknown
 * arms, invalid UTF-8) are refused by line number with nothing written and no value echoed.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventCodec, type VariantAssigned, type VariantContaminated } from '@outreach/contracts';
import { readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
// The app's `experiments` repository (its type is declared with the plugin).
import type {} from '../src/plugins/experiment.js';
import { importHistory } from '../src/workflow/import-history.js';
import {
  auth,
  createExperiment,
  experimentEnv,
  postAssignments,
  putAssignment,
  replayFromLog,
  sendRecorded,
} from './experiment-env.js';

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
    // h1, h2, h3 get the arm they saw first; p1 keeps the platform's (and is contaminated).
    expect(first.out).toMatch(
      /assignments: 3 seeded with the arm history saw first, 0 already assigned it, 1 kept on another arm \(contaminated\), 0 held by another experiment/,
    );
    expect(
      await t.query(
        `SELECT candidate_key, exposed_variants, assigned_variant FROM contaminations ORDER BY candidate_key`,
      ),
    ).toEqual([
      // Seeded with the arm its history saw first: it saw both, so it is contaminated all the same.
      { candidate_key: 'h1', exposed_variants: ['A', 'B'], assigned_variant: 'A' },
      { candidate_key: 'p1', exposed_variants: [other], assigned_variant: platform },
    ]);
    expect(
      await t.query(`SELECT count(*)::int AS n FROM exposure_events WHERE source = 'import' AND origin = 'old-mailer'`),
    ).toEqual([{ n: 4 }]);

    const report = (await app.inject({ url: '/v1/experiments/legacy/report', headers: auth })).json();
    expect(report.contamination).toEqual({ candidates: 2, withImportedHistory: 2, listed: 2 });
    // Clean imported history shows per arm; contaminated candidates are excluded as always.
    expect(report.variants).toEqual([
      {
        variant: 'A',
        assigned: 0,
        exposedCandidates: 0,
        exposures: 0,
        importedCandidates: 1,
        importedExposures: 1,
        repliedCandidates: 0,
      },
      {
        variant: 'B',
        assigned: 0,
        exposedCandidates: 0,
        exposures: 0,
        importedCandidates: 1,
        importedExposures: 1,
        repliedCandidates: 0,
      },
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

  it('seeds the sticky assignment with the arm history saw first, so the platform answers that arm; conflicts keep what is stored', async () => {
    const app = await setUp();
    // The same salt and weights without history: what the hash draws for these candidates.
    const arms = [
      { name: 'A', weight: 1 },
      { name: 'B', weight: 1 },
    ];
    const control = await createExperiment(app, { experimentId: 'control', salt: 'legacy-test-salt', variants: arms });
    expect(control.statusCode).toBe(201);
    const saw = Array.from({ length: 12 }, (_, i) => `saw-a-${i}`);
    const drawn = (await postAssignments(app, 'control', saw)).json().assignments as Array<{ variant: string }>;
    // Without the seed, some of them would be sent B: the test can fail.
    expect(drawn.filter((a) => a.variant === 'B').length).toBeGreaterThan(0);

    // Conflicts: assigned by the platform before the import (p-same to the arm history says, p-other not).
    const platform = async (candidate: string) =>
      (await putAssignment(app, 'legacy', candidate)).json().variant as string;
    const pSame = await platform('p-same');
    const pOther = await platform('p-other');
    // Exclusion group: e1 is in g1 already; history says it saw g2's arm.
    for (const id of ['g1', 'g2']) {
      const created = await createExperiment(app, { experimentId: id, exclusionGroup: 'grp', variants: arms });
      expect(created.statusCode).toBe(201);
    }
    const e1InG1 = (await putAssignment(app, 'g1', 'e1')).json();
    expect(e1InG1.enrolled).toBe(true);
    // A retired arm (weight 0 now) and a stopped experiment: history still says what was seen.
    const retired = await createExperiment(app, {
      experimentId: 'retired',
      status: 'stopped',
      variants: [
        { name: 'A', weight: 1 },
        { name: 'Z', weight: 0 },
      ],
    });
    expect(retired.statusCode).toBe(201);

    const lines = [
      'candidate,experiment,variant,time',
      ...saw.map((c) => `${c},legacy,A,2025-02-01T10:00:00Z`),
      `p-same,legacy,${pSame},2025-02-01T10:00:00Z`,
      `p-other,legacy,${pOther === 'A' ? 'B' : 'A'},2025-02-01T10:00:00Z`,
      // Both arms: the first seen is seeded (B, a day earlier); a tie goes to the lowest name.
      'm1,legacy,A,2025-02-02T10:00:00Z',
      'm1,legacy,B,2025-02-01T10:00:00Z',
      'm2,legacy,B,2025-02-01T10:00:00Z',
      'm2,legacy,A,2025-02-01T11:00:00+01:00',
      'e1,g2,B,2025-02-01T10:00:00Z',
      'e2,g2,B,2025-02-01T10:00:00Z',
      'r1,retired,Z,2025-02-01T10:00:00Z',
    ];
    const history = file('seeds.csv', `${lines.join('\n')}\n`);
    const run = cli(history);
    expect(run.status, run.out).toBe(0);
    expect(run.out).toMatch(
      new RegExp(
        `assignments: ${saw.length + 4} seeded with the arm history saw first, 1 already assigned it, 1 kept on another arm \\(contaminated\\), 1 held by another experiment of their exclusion group`,
      ),
    );

    // What the platform answers now (the planner's PUT and batch): the arm history saw, not the hash's.
    const answered = (await postAssignments(app, 'legacy', [...saw, 'p-same', 'p-other', 'm1', 'm2'])).json()
      .assignments as Array<{ candidateKey: string; variant: string; created: boolean; assignedAt: string }>;
    const variantOf = Object.fromEntries(answered.map((a) => [a.candidateKey, a.variant]));
    for (const c of saw) expect(variantOf[c], c).toBe('A');
    expect(answered.every((a) => !a.created)).toBe(true);
    expect(answered.find((a) => a.candidateKey === saw[0])?.assignedAt).toBe('2025-02-01T10:00:00.000Z');
    expect(variantOf).toMatchObject({ 'p-same': pSame, 'p-other': pOther, m1: 'B', m2: 'A' });
    const retiredAnswer = (await putAssignment(app, 'retired', 'r1')).json();
    expect(retiredAnswer).toMatchObject({ enrolled: true, variant: 'Z' });
    // e1 stays in g1 (not seeded into g2); e2, whom nobody held, is g2's, and g1 may not take it.
    expect((await putAssignment(app, 'g2', 'e1')).json()).toMatchObject({
      enrolled: false,
      reason: 'not enrolled: candidate is in experiment g1 of exclusion group grp',
    });
    expect((await putAssignment(app, 'g2', 'e2')).json()).toMatchObject({
      enrolled: true,
      variant: 'B',
    });
    expect((await putAssignment(app, 'g1', 'e2')).json()).toMatchObject({
      enrolled: false,
    });

    // Nothing flagged for the candidates whose history is one arm; the report keeps the seeds out of
    // the sample-ratio test (no weights drew them) and shows them as imported candidates.
    const flagged = await t.query<{ candidate_key: string }>(
      `SELECT candidate_key FROM contaminations WHERE experiment_id = 'legacy' ORDER BY candidate_key`,
    );
    expect(flagged.map((r) => r.candidate_key)).toEqual(['m1', 'm2', 'p-other']);
    const report = (await app.inject({ url: '/v1/experiments/legacy/report', headers: auth })).json();
    const a = report.variants.find((v: { variant: string }) => v.variant === 'A');
    expect(a).toMatchObject({ importedCandidates: saw.length + (pSame === 'A' ? 1 : 0) });
    expect(
      report.sampleRatioMismatch.periods
        .flatMap((p: { observed: Record<string, number> }) => Object.values(p.observed))
        .reduce((x: number, y: number) => x + y, 0),
    ).toBe(
      // The platform's own clean draws only: p-same (p-other is contaminated, so left out).
      1,
    );

    // The seeded assignments go out as VariantAssigned, correlated with the import.
    const published = await readTopic(
      t.kafka,
      t.topic('assignments'),
      (m) =>
        m.filter(
          (x) => x.headers['event-type'] === 'VariantAssigned' && x.headers['correlation-id']?.startsWith('import:'),
        ).length >=
        saw.length + 4,
    );
    const seededEvents = published
      .filter((m) => m.headers['event-type'] === 'VariantAssigned')
      .map((m) => eventCodec.decode(m.value as Buffer) as VariantAssigned)
      .filter((e) => e.correlationId.startsWith('import:'));
    expect(seededEvents.map((e) => `${e.experimentId}/${e.candidateKey}=${e.variant}`).sort()).toEqual(
      [...saw.map((c) => `legacy/${c}=A`), 'legacy/m1=B', 'legacy/m2=A', 'g2/e2=B', 'retired/r1=Z'].sort(),
    );

    // The same file again changes nothing, assignments included.
    const before = await snapshot();
    const again = cli(history);
    expect(again.status, again.out).toBe(0);
    expect(again.out).not.toMatch(/assignments:/);
    expect(await snapshot()).toEqual(before);
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
