/**
 * `npm run console:screenshots`: a screenshot of each page of the operations console (ADR 015) into
 * docs/console/ (or `--out <dir>`), for the README. It brings up (or reuses) Kafka and PostgreSQL like
 * the demo, starts the four services and the console as processes under a run of their own, puts a
 * little of everything in (sends, a held campaign, a stalled conversation, an experiment, audited
 * actions), then drives Debian's Chromium through playwright-core (CHROMIUM_PATH, default
 * /usr/bin/chromium): sign-in, then each page at 1280 px wide. The run's topics and schemas are
 * dropped at the end.
 *
 *   npm run console:screenshots [-- --out DIR] [-- --port-base N]   (default 28080)
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createKafka, EventProducer } from '@outreach/shared';
import { SmtpSink, waitFor } from '@outreach/testkit';
import { chromium } from 'playwright-core';
import { up } from './infra.js';
import { startConsole, type RunningConsole } from './lib/console.js';
import { shownPath } from './lib/paths.js';
import { ingressBody, outreachRequest, Stack } from './lib/stack.js';

const root = join(import.meta.dirname, '..');
const { values } = parseArgs({
  options: { out: { type: 'string' }, 'port-base': { type: 'string', default: '28080' } },
});
const out = resolve(values.out ?? join(root, 'docs', 'console'));
const portBase = Number(values['port-base']);
const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const run = `shots${Date.now().toString(36)}`;
const TOKEN = 'screenshots-token';

/** The pages, in the navigation's order: file name and path. */
export const PAGES = [
  ['overview', '/'],
  ['campaigns', '/campaigns?campaignId=backend-engineers'],
  ['ambiguous', '/ambiguous'],
  ['send-lookup', '/sends?requestId=shots-2'],
  ['stalled', '/stalled'],
  ['conversation', '/stalled/conversation?id=backend-engineers%3Acand-stall'],
  ['dead-letters', `/dlq?topic=${encodeURIComponent(`${run}.outreach.rejected.v1.dlq`)}`],
  ['experiments', '/experiments?experimentId=subject-line'],
  ['audit', '/audit'],
] as const;

function say(message: string): void {
  process.stdout.write(`[console:screenshots] ${message}\n`);
}

async function main(): Promise<void> {
  if (!existsSync(chromiumPath)) throw new Error(`${chromiumPath} is missing: apt-get install -y chromium`);
  const state = await up();
  if (state.schemaRegistryUrl) process.env.SCHEMA_REGISTRY_URL ??= state.schemaRegistryUrl;
  const sink = await new SmtpSink().start();
  const stack = new Stack({
    run,
    kafkaBrokers: state.kafkaBrokers,
    databaseUrl: state.databaseUrl,
    portBase,
    token: TOKEN,
    smtpPort: sink.port,
    env: (service) => (service === 'liveness' ? { GRACE_INBOUND_MS: '1000', SWEEP_INTERVAL_MS: '300' } : {}),
  });
  let operationsConsole: RunningConsole | undefined;
  const dir = join(tmpdir(), `${run}-console`);
  try {
    await stack.createTopics(1);
    for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) await stack.start(service);
    operationsConsole = await startConsole({
      stack,
      databaseUrl: state.databaseUrl,
      kafkaBrokers: state.kafkaBrokers,
      port: portBase + 9,
      token: TOKEN,
      dir,
      user: 'ada',
    });
    // A little of everything for the pages to show.
    await stack.json('experiment', '/v1/experiments', {
      method: 'POST',
      body: {
        experimentId: 'subject-line',
        variants: [
          { name: 'short', weight: 1 },
          { name: 'personal', weight: 1 },
        ],
      },
    });
    await stack.json('experiment', '/v1/experiments/subject-line/assignments', {
      method: 'POST',
      body: { candidateIds: Array.from({ length: 120 }, (_, i) => `cand-${i}`) },
    });
    for (let i = 1; i <= 6; i++) {
      const request = outreachRequest({
        requestId: `shots-${i}`,
        campaignId: 'backend-engineers',
        candidateId: `cand-${i}`,
        email: `cand-${i}@example.com`,
        ...(i === 2 ? { experimentId: 'no-such-experiment' } : {}),
      });
      await fetch(stack.url('planner', '/v1/outreach-requests'), {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(ingressBody(request)),
      });
    }
    await waitFor(() => sink.messages.length >= 5, { timeoutMs: 60_000, description: 'five emails delivered' });
    await stack.json('planner', '/v1/conversations/backend-engineers%3Acand-stall/events', {
      method: 'POST',
      body: { type: 'MessageReceived', campaignId: 'backend-engineers', candidateKey: 'cand-stall', messageId: 'm-1' },
    });
    await waitFor(
      async () =>
        (
          await stack.json<{ conversations: unknown[] }>(
            'liveness',
            '/v1/conversations/stalled?campaignId=backend-engineers',
          )
        ).conversations.length > 0,
      { timeoutMs: 30_000, description: 'the conversation flagged as stalled' },
    );

    // One dead letter, as a consumer would leave it (its address masked on the page).
    const producer = new EventProducer(createKafka({ brokers: state.kafkaBrokers.split(','), clientId: run }));
    await producer.publishRaw([
      {
        topic: `${stack.prefix}outreach.rejected.v1.dlq`,
        records: [
          {
            key: 'shots-9',
            value: Buffer.from(
              JSON.stringify({ requestId: 'shots-9', email: 'cand-9@example.com', reason: 'schema_invalid' }),
            ),
            headers: {
              'dlq-error-code': 'HANDLER',
              'dlq-reason': 'the handler failed: a timeout',
              'dlq-source-topic': `${stack.prefix}outreach.rejected.v1`,
            },
          },
        ],
      },
    ]);
    await producer.disconnect();

    const browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
    });
    try {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const page = await context.newPage();
      const url = operationsConsole.url;
      mkdirSync(out, { recursive: true });
      await page.goto(`${url}/login`);
      await page.screenshot({ path: join(out, 'sign-in.png') });
      await page.fill('input[name=username]', operationsConsole.user);
      await page.fill('input[name=password]', operationsConsole.password);
      await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/login')), page.click('button[type=submit]')]);
      // Two audited actions: a pause with its reason, and the resume.
      for (const [label, reason] of [
        ['Pause…', 'incident 7: wrong template'],
        ['Resume…', 'template fixed'],
      ] as const) {
        await page.goto(`${url}/campaigns?campaignId=backend-engineers`);
        await page.locator('tr[data-campaign="backend-engineers"] a', { hasText: label }).click();
        await page.fill('textarea[name=reason]', reason);
        await page.getByTestId('confirm').click();
        await page.getByTestId('notice-ok').waitFor();
      }
      for (const [name, path] of PAGES) {
        const response = await page.goto(`${url}${path}`);
        if (response?.status() !== 200) throw new Error(`${path} answered ${response?.status()}`);
        await page.screenshot({ path: join(out, `${name}.png`), fullPage: true });
        say(`${shownPath(join(out, `${name}.png`))}`);
      }
      await context.close();
    } finally {
      await browser.close();
    }
  } catch (error) {
    process.stderr.write(`${stack.tails()}\n`);
    throw error;
  } finally {
    await operationsConsole?.stop();
    await stack.stopAll();
    await sink.stop();
    await stack.dropData(['planner', 'sender', 'experiment', 'liveness']).catch(() => undefined);
    if (operationsConsole) {
      const { default: pg } = await import('pg');
      const client = new pg.Client({ connectionString: state.databaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${operationsConsole.schema}" CASCADE`);
      await client.end();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === import.meta.filename) {
  main().then(
    () => process.exit(0),
    (error: unknown) => {
      process.stderr.write(`[console:screenshots] ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    },
  );
}
