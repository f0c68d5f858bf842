/**
 * Issue #16 follow-up: the planner's token for the experiment service is a mounted file, never an
 * environment variable, and a rotation needs no restart. The planner runs as a process (its pid and
 * its log lines are the evidence) against the real experiment service (a process too, its accepted
 * tokens a file as well); both read their files again every SECRET_FILE_REFRESH_MS. And what stops
 * the start: both variables, an unreadable or empty file (exit 78, naming the variable and the path,
 * never the token).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventCodec, type SendRequested } from '@outreach/contracts';
import { freePort, readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { defineExperiment, experimentTestEnv, outreachRequested, plannerTestEnv } from './harness.js';

const REFRESH_MS = '200';
let planner: ServiceTestEnv | undefined;
let experiment: ServiceTestEnv | undefined;
let dir: string | undefined;
afterEach(async () => {
  await planner?.cleanup();
  await experiment?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
  planner = experiment = dir = undefined;
});

/** As the kubelet updates a mounted Secret: the new content appears at once, never half-written. */
function replaceFile(path: string, content: string): void {
  writeFileSync(`${path}.new`, content);
  renameSync(`${path}.new`, path);
}

const request = (candidateId: string) =>
  outreachRequested({
    requestId: `req-${candidateId}`,
    candidateId,
    campaignId: 'camp-rotation',
    experimentId: 'rotation',
    contents: [
      { variant: 'A', subject: 'Subject A', body: 'Body A' },
      { variant: 'B', subject: 'Subject B', body: 'Body B' },
    ],
  });

async function ready(url: string, what: string, logs: () => string[]): Promise<void> {
  await waitFor(async () => (await fetch(`${url}/health/ready`).catch(() => undefined))?.ok === true, {
    timeoutMs: 60_000,
    description: what,
  }).catch((error: unknown) => {
    throw new Error(`${String(error)}\n${logs().slice(-20).join('\n')}`);
  });
}

describe('EXPERIMENT_TOKEN_FILE', () => {
  it('a rotated token file reaches the running planner: the experiment service takes only the new token, and variants keep being assigned', async () => {
    dir = mkdtempSync(join(tmpdir(), 'planner-token-'));
    const OLD = randomBytes(24).toString('hex');
    const NEW = randomBytes(24).toString('hex');
    // The experiment service's publish and read tokens, and the planner's token: one Secret key each.
    const accepted = join(dir, 'accepted');
    const plannerToken = join(dir, 'experiment-token');
    writeFileSync(accepted, `${OLD}\n`);
    writeFileSync(plannerToken, `${OLD}\n`);

    experiment = await experimentTestEnv();
    const experimentUrl = `http://127.0.0.1:${await freePort()}`;
    const experimentProc = experiment.startProcess({
      HTTP_PORT: new URL(experimentUrl).port,
      API_TOKENS_PUBLISH: '',
      API_TOKENS_READ: '',
      API_TOKENS_PUBLISH_FILE: accepted,
      API_TOKENS_READ_FILE: accepted,
      SECRET_FILE_REFRESH_MS: REFRESH_MS,
    });
    await ready(experimentUrl, 'the experiment service', () => experimentProc.stdoutLines);
    // Definitions need operate, which keeps the harness's token.
    expect((await defineExperiment(experimentUrl, 'rotation')).status).toBe(201);
    const readWith = async (token: string) =>
      (await fetch(`${experimentUrl}/v1/experiments/rotation`, { headers: { authorization: `Bearer ${token}` } }))
        .status;

    planner = await plannerTestEnv({
      EXPERIMENT_URL: experimentUrl,
      EXPERIMENT_TOKEN_FILE: plannerToken,
      SECRET_FILE_REFRESH_MS: REFRESH_MS,
      EXPERIMENT_TIMEOUT_MS: '2000',
      SCHEDULER_INTERVAL_MS: '100',
    });
    const plannerUrl = `http://127.0.0.1:${await freePort()}`;
    const proc = planner.startProcess({ HTTP_PORT: new URL(plannerUrl).port });
    await ready(plannerUrl, 'the planner', () => [...proc.stdoutLines, ...proc.stderrLines]);
    const pid = proc.child.pid;
    const env = planner;
    const sends = async (until: (s: SendRequested[]) => boolean) =>
      (
        await readTopic(
          env.kafka,
          env.topic('sendRequested'),
          (messages) => until(messages.map((m) => eventCodec.decode(m.value as Buffer) as SendRequested)),
          45_000,
        )
      ).map((m) => eventCodec.decode(m.value as Buffer) as SendRequested);
    const has =
      (...keys: string[]) =>
      (s: SendRequested[]) =>
        keys.every((k) => s.some((x) => x.candidateKey === k));
    // Summed over the series (one per refusing status; each is exported at 0 from the start).
    const refusals = async () =>
      [
        ...(await (await fetch(`${plannerUrl}/metrics`)).text()).matchAll(
          /^outreach_planner_peer_auth_failures_total\{[^}]*\} (\d+)/gm,
        ),
      ].reduce((sum, m) => sum + Number(m[1]), 0);

    // 1. The old token, on both sides.
    await planner.publish('outreachRequested', [request('before')]);
    await sends(has('before'));
    expect(await refusals()).toBe(0);
    // Exported at 0 before any refusal, so the alert's increase() sees the first one.
    const before = await (await fetch(`${plannerUrl}/metrics`)).text();
    for (const status of ['401', '403'])
      expect(before).toMatch(
        new RegExp(`^outreach_planner_peer_auth_failures_total\\{[^}]*status="${status}"[^}]*\\} 0$`, 'm'),
      );

    // 2. The experiment service rotates to the new token alone (its file read again, no restart).
    replaceFile(accepted, `${NEW}\n`);
    await waitFor(async () => (await readWith(OLD)) === 401 && (await readWith(NEW)) === 200, {
      timeoutMs: 15_000,
      description: 'the experiment service taking only the new token',
    });

    // 3. The planner still holds the old one: its next call is refused, and the request waits.
    await planner.publish('outreachRequested', [request('during')]);
    await waitFor(async () => (await refusals()) >= 1, {
      timeoutMs: 30_000,
      description: 'the planner refused with the old token',
    });
    expect(proc.stdoutLines.some((l) => l.includes('"alert":"peer_auth_failed"'))).toBe(true);

    // 4. The planner's file rotated: the same process uses the new token; the waiting request and a
    //    new one are planned, each with the variant the experiment service stored.
    replaceFile(plannerToken, `${NEW}\n`);
    await planner.publish('outreachRequested', [request('after')]);
    const planned = await sends(has('before', 'during', 'after'));
    expect(proc.child.pid).toBe(pid);
    expect(proc.child.exitCode).toBeNull();
    for (const send of planned) {
      const stored = (await (
        await fetch(`${experimentUrl}/v1/experiments/rotation/assignments/${send.candidateKey}`, {
          headers: { authorization: `Bearer ${NEW}` },
        })
      ).json()) as { variant: string };
      expect(['A', 'B']).toContain(send.variant);
      expect(send.variant, send.candidateKey).toBe(stored.variant);
    }
    expect(await planner.query(`SELECT 1 FROM outbox WHERE topic LIKE '%.dlq'`)).toHaveLength(0);

    // The change is logged by variable and path; no line of the planner holds either token.
    expect(proc.stdoutLines.some((l) => l.includes('EXPERIMENT_TOKEN_FILE changed') && l.includes(plannerToken))).toBe(
      true,
    );
    const output = [...proc.stdoutLines, ...proc.stderrLines].join('\n');
    expect(output).not.toContain(OLD);
    expect(output).not.toContain(NEW);
  }, 180_000);

  it('refuses to start with both variables, an unreadable or an empty file: exit 78 naming the variable and path, never the token', async () => {
    dir = mkdtempSync(join(tmpdir(), 'planner-token-'));
    const TOKEN = randomBytes(24).toString('hex');
    const file = join(dir, 'experiment-token');
    const empty = join(dir, 'empty');
    writeFileSync(file, `${TOKEN}\n`);
    writeFileSync(empty, '\n');
    planner = await plannerTestEnv({ EXPERIMENT_URL: 'http://127.0.0.1:9' });
    const cases: Array<[Record<string, string>, RegExp]> = [
      [
        { EXPERIMENT_TOKEN_FILE: file, EXPERIMENT_TOKEN: TOKEN },
        /set EXPERIMENT_TOKEN_FILE or EXPERIMENT_TOKEN, not both/,
      ],
      [
        { EXPERIMENT_TOKEN_FILE: join(dir, 'missing') },
        /EXPERIMENT_TOKEN_FILE \(\S+\/missing\) cannot be read \(ENOENT\)/,
      ],
      [{ EXPERIMENT_TOKEN_FILE: empty }, /EXPERIMENT_TOKEN_FILE \(\S+\/empty\) is empty/],
    ];
    const env = planner;
    await Promise.all(
      cases.map(async ([overrides, reason]) => {
        const proc = env.startProcess({ HTTP_PORT: String(await freePort()), ...overrides });
        expect(await proc.exited, proc.stderrLines.join('\n')).toBe(78);
        const stderr = proc.stderrLines.join('\n');
        expect(stderr).toMatch(reason);
        expect([...proc.stdoutLines, stderr].join('\n')).not.toContain(TOKEN);
      }),
    );
  }, 180_000);
});
