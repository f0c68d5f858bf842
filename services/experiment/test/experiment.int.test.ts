/**
 * The experiment service against the real broker and database: definitions and their 4xx reasons,
 * sticky assignment (batch, racing processes, weight changes), exclusion groups, the dry run,
 * balance, contamination from real SendRecorded events, and replay of the exposure projection.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { eventCodec, type VariantContaminated } from '@outreach/contracts';
import { readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
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
afterEach(() => t?.cleanup());

const fiftyFifty = {
  variants: [
    { name: 'A', weight: 1 },
    { name: 'B', weight: 1 },
  ],
};

describe('experiment service', () => {
  it('answers mistakes in definitions with 4xx and reasons', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    expect(
      (await app.inject({ method: 'POST', url: '/v1/experiments', payload: { experimentId: 'x', ...fiftyFifty } }))
        .statusCode,
    ).toBe(401);
    const duplicate = await createExperiment(app, {
      experimentId: 'dup',
      variants: [
        { name: 'A', weight: 1 },
        { name: 'A', weight: 1 },
      ],
    });
    expect(duplicate.statusCode).toBe(400);
    expect(duplicate.json().message).toMatch(/duplicate variant names: A/);
    const weights = await createExperiment(app, {
      experimentId: 'w',
      variants: [
        { name: 'A', weight: -1 },
        { name: 'B', weight: 0 },
      ],
    });
    expect(weights.json().message).toMatch(
      /variants\[0\]\.weight must be a non-negative integer.*at least one variant needs a positive weight/,
    );
    expect(
      (await createExperiment(app, { experimentId: 'one', variants: [{ name: 'A', weight: 1 }] })).json().message,
    ).toMatch(/at least two variants/);
    expect((await createExperiment(app, { experimentId: 'ok', ...fiftyFifty, extra: true })).statusCode).toBe(400);
    expect((await createExperiment(app, { experimentId: 'ok', ...fiftyFifty })).statusCode).toBe(201);
    expect((await createExperiment(app, { experimentId: 'ok', ...fiftyFifty })).statusCode).toBe(409);
    const unknown = await putAssignment(app, 'nope', 'c1');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().message).toBe('no experiment with this id');
    // An address as candidate id: the planner sends its keyed hash; this service cannot make one,
    // and must not put the address on experiment.assignments.v1. No answer echoes the id.
    for (const method of ['PUT', 'GET'] as const) {
      const address = await app.inject({
        method,
        url: `/v1/experiments/ok/assignments/${encodeURIComponent('ada\u200b@leak.example')}`,
        headers: auth,
      });
      expect(address.statusCode, method).toBe(400);
      expect(address.body).not.toMatch(/ada|leak/);
    }
    const unassigned = await app.inject({ url: '/v1/experiments/ok/assignments/cand-secret', headers: auth });
    expect(unassigned.statusCode).toBe(404);
    expect(unassigned.body).not.toContain('cand-secret');
    const removal = await app.inject({
      method: 'PATCH',
      url: '/v1/experiments/ok',
      headers: auth,
      payload: { variants: [{ name: 'A', weight: 1 }] },
    });
    expect(removal.statusCode).toBe(409);
    expect((await app.inject({ url: '/v1/experiments/ok', headers: auth })).json()).not.toHaveProperty('salt');
  });

  it('assigns stickily: idempotent PUT, GET that never creates, normalized keys, weight changes that flip nobody', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'sticky', ...fiftyFifty });
    expect((await app.inject({ url: '/v1/experiments/sticky/assignments/c1', headers: auth })).statusCode).toBe(404);
    const first = (await putAssignment(app, 'sticky', 'c1')).json();
    expect(first).toMatchObject({ enrolled: true, candidateKey: 'c1', created: true });
    const again = (await putAssignment(app, 'sticky', encodeURIComponent(' c1 '))).json();
    expect(again).toMatchObject({ variant: first.variant, created: false });

    const ids = Array.from({ length: 500 }, (_, i) => `cand-${i}`);
    const before = (await postAssignments(app, 'sticky', ids)).json();
    await app.inject({
      method: 'PATCH',
      url: '/v1/experiments/sticky',
      headers: auth,
      payload: {
        variants: [
          { name: 'A', weight: 1 },
          { name: 'B', weight: 99 },
        ],
      },
    });
    const after = (await postAssignments(app, 'sticky', ids)).json();
    const flips = before.assignments.filter(
      (a: { variant: string }, i: number) => a.variant !== after.assignments[i].variant,
    );
    expect(flips).toHaveLength(0);
    expect(after.assignments.every((a: { created: boolean }) => !a.created)).toBe(true);
    // New candidates now follow the new weights.
    const newcomers = (
      await postAssignments(
        app,
        'sticky',
        Array.from({ length: 200 }, (_, i) => `new-${i}`),
      )
    ).json();
    expect(newcomers.assignments.filter((a: { variant: string }) => a.variant === 'B').length).toBeGreaterThan(180);

    await app.inject({ method: 'PATCH', url: '/v1/experiments/sticky', headers: auth, payload: { status: 'paused' } });
    expect((await putAssignment(app, 'sticky', 'late')).json()).toMatchObject({
      enrolled: false,
      reason: 'experiment is paused',
    });
    expect((await putAssignment(app, 'sticky', 'c1')).json()).toMatchObject({ variant: first.variant });
  });

  it('puts a candidate in at most one experiment of an exclusion group', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'subject', ...fiftyFifty, exclusionGroup: 'copy' });
    await createExperiment(app, { experimentId: 'signature', ...fiftyFifty, exclusionGroup: 'copy' });
    expect((await putAssignment(app, 'subject', 'c1')).json()).toMatchObject({ enrolled: true });
    expect((await putAssignment(app, 'signature', 'c1')).json()).toMatchObject({
      enrolled: false,
      reason: 'not enrolled: candidate is in experiment subject of exclusion group copy',
    });
    expect((await putAssignment(app, 'signature', 'c2')).json()).toMatchObject({ enrolled: true });
  });

  it('dry run: 100 synthetic ids assigned twice (weights changed between) are 100/100 stable, and nothing is stored', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'dry', ...fiftyFifty, exclusionGroup: 'g' });
    const result = (
      await app.inject({ method: 'POST', url: '/v1/experiments/dry/dry-run', headers: auth, payload: { n: 100 } })
    ).json();
    expect(result).toMatchObject({ n: 100, stable: 100, flipped: 0, notEnrolled: 0 });
    expect(await t.query('SELECT * FROM assignments')).toEqual([]);
    expect(await t.query('SELECT * FROM group_memberships')).toEqual([]);
    expect(await t.query('SELECT * FROM outbox')).toEqual([]);
    expect((await app.inject({ url: '/v1/experiments/dry', headers: auth })).json().variants).toEqual(
      fiftyFifty.variants,
    );

    const cli = spawnSync(
      process.execPath,
      [
        '--conditions=source',
        '--import',
        join(root, 'node_modules/tsx/dist/loader.mjs'),
        join(root, 'services/experiment/src/cli/dry-run.ts'),
        '--experiment',
        'dry',
        '--n',
        '100',
      ],
      { env: { PATH: process.env.PATH, DATABASE_URL: t.databaseUrl, DATABASE_SCHEMA: t.schema }, encoding: 'utf8' },
    );
    expect(cli.status, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/100\/100 stable, 0 flipped/);
    expect(await t.query('SELECT * FROM assignments')).toEqual([]);
  });

  it('10,000 sequential candidates at 50/50 pass the sample-ratio-mismatch test, and VariantAssigned is published', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'balance', ...fiftyFifty });
    for (let start = 1; start <= 10_000; start += 1_000) {
      const candidateIds = Array.from({ length: 1_000 }, (_, i) => `cand-${start + i}`);
      expect((await postAssignments(app, 'balance', candidateIds)).statusCode).toBe(200);
    }
    const report = (await app.inject({ url: '/v1/experiments/balance/report', headers: auth })).json();
    expect(report.assignedTotal).toBe(10_000);
    expect(report.sampleRatioMismatch.mismatch).toBe(false);
    expect(report.sampleRatioMismatch.pValue).toBeGreaterThanOrEqual(0.001);
    expect(report.variants.map((v: { assigned: number }) => v.assigned).reduce((a: number, b: number) => a + b)).toBe(
      10_000,
    );
    const published = await readTopic(t.kafka, t.topic('assignments'), (m) => m.length >= 10_000, 60_000);
    expect(new Set(published.map((m) => m.headers['event-id'])).size).toBe(10_000);
  });

  it('200 concurrent first assignments for one candidate from two processes agree, and store one row', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, {
      experimentId: 'race',
      variants: [
        { name: 'A', weight: 1 },
        { name: 'B', weight: 1 },
        { name: 'C', weight: 1 },
      ],
    });
    const ports: number[] = [];
    for (const proc of [t.startProcess({ HTTP_PORT: '0' }), t.startProcess({ HTTP_PORT: '0' })]) {
      const listening = await waitFor(
        () =>
          proc.stdoutLines
            .map((l) => /"msg":"Server listening at http:\/\/127\.0\.0\.1:(\d+)"/.exec(l)?.[1])
            .find(Boolean),
        { timeoutMs: 30_000, description: 'a process to listen' },
      );
      ports.push(Number(listening));
    }
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        fetch(`http://127.0.0.1:${ports[i % 2]}/v1/experiments/race/assignments/racer`, {
          method: 'PUT',
          headers: auth,
        }).then((r) => r.json() as Promise<{ variant: string; created: boolean }>),
      ),
    );
    expect(new Set(responses.map((r) => r.variant)).size).toBe(1);
    expect(responses.filter((r) => r.created)).toHaveLength(1);
    expect(await t.query(`SELECT variant FROM assignments WHERE candidate_key = 'racer'`)).toHaveLength(1);
  });

  it('detects contamination from real SendRecorded events, publishes it, excludes it from metrics, and replays to the same counts', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'contam', ...fiftyFifty });
    const assigned = (await postAssignments(app, 'contam', ['c1', 'c2', 'c3'])).json().assignments as Array<{
      candidateKey: string;
      variant: string;
    }>;
    const other = (v: string) => (v === 'A' ? 'B' : 'A');
    const events = [
      ...assigned.map((a) =>
        sendRecorded({ experimentId: 'contam', candidateKey: a.candidateKey, variant: a.variant, step: 'intro' }),
      ),
      // c1 also receives the other arm on a follow-up: contamination.
      sendRecorded({
        experimentId: 'contam',
        candidateKey: 'c1',
        variant: other(assigned[0]?.variant as string),
        step: 'follow-up',
      }),
      sendRecorded({
        experimentId: 'contam',
        candidateKey: 'c2',
        variant: assigned[1]?.variant as string,
        step: 'follow-up',
      }),
    ];
    await t.publish('sendRecorded', events);
    await t.publish('sendRecorded', events.slice(0, 2)); // redelivered: counted once

    await waitFor(
      async () =>
        (await t.query('SELECT 1 FROM contaminations')).length === 1 &&
        (await t.query('SELECT 1 FROM exposure_events')).length === 5,
      {
        timeoutMs: 30_000,
        description: 'exposures recorded and the contamination detected',
      },
    );
    const report = (await app.inject({ url: '/v1/experiments/contam/report', headers: auth })).json();
    expect(report.contaminated).toEqual([expect.objectContaining({ candidateKey: 'c1', exposedVariants: ['A', 'B'] })]);
    expect(report.variants.reduce((sum: number, v: { assigned: number }) => sum + v.assigned, 0)).toBe(2);
    expect(report.variants.reduce((sum: number, v: { exposures: number }) => sum + v.exposures, 0)).toBe(3);

    const published = await readTopic(t.kafka, t.topic('assignments'), (m) =>
      m.some((x) => x.headers['event-type'] === 'VariantContaminated'),
    );
    const contaminated = published
      .filter((m) => m.headers['event-type'] === 'VariantContaminated')
      .map((m) => eventCodec.decode(m.value as Buffer) as VariantContaminated);
    expect(contaminated[0]).toMatchObject({
      candidateKey: 'c1',
      assignedVariant: assigned[0]?.variant,
      exposedVariants: ['A', 'B'],
    });

    const replay = await replayFromLog(t);
    expect(replay.messages).toBe(7);
    expect(replay.replayed).toEqual(replay.live);
    expect(replay.matches).toBe(true);
  });
});
