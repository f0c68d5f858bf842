/**
 * The operations console (#33) in a real browser: Debian's Chromium, headless, driven by
 * playwright-core, against the console and the four services as processes on the real Kafka and
 * PostgreSQL. An operator signs in, every page renders under the console's CSP, a pause and a resume
 * change what the planner reports for a request, and an ambiguous send resolved in the work queue
 * changes the sender's status (a second verdict is refused 409 and the page says why). The attacks:
 * a reader sees no action and is refused 403 when it posts one anyway, a cross-site form and a POST
 * without the CSRF token are refused, proxy headers from an address outside the proxy's CIDR are
 * ignored even with the right secret, and script in a reason or a campaign id renders as text.
 */
import { createServer, type Server } from 'node:http';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKafka, EventProducer } from '@outreach/shared';
import { freePort, SmtpSink, startProcess, waitFor, type RunningProcess } from '@outreach/testkit';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ingressBody, outreachRequest, Stack } from '../../scripts/lib/stack.js';
import { hashPassword } from '../../services/console/src/security/users.js';

const root = join(import.meta.dirname, '..', '..');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const TOKEN = 'console-e2e-token';
// The console's own tokens: the services accept each in one scope only.
const READ_TOKEN = 'console-e2e-read-token';
const OPERATE_TOKEN = 'console-e2e-operate-token';
const PROXY_SECRET = 'console-e2e-proxy-secret-0123456789';
const PASSWORDS = { ada: 'ada-operator-pass', rita: 'rita-reader-pass' };
const run = `console${Date.now().toString(36)}`;

let stack: Stack;
let sink: SmtpSink;
let consoleProc: RunningProcess;
let consoleUrl: string;
let browser: Browser;
let attacker: Server;
let attackerUrl: string;
let dir: string;

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (or set CHROMIUM_PATH)`);
  // Mail to `slow…` is answered long after the sender stopped waiting: an ambiguous send.
  sink = await new SmtpSink({ behaviour: (to) => (to.startsWith('slow') ? { delayMs: 1_500 } : undefined) }).start();
  stack = new Stack({
    run,
    kafkaBrokers: inject('kafkaBrokers'),
    databaseUrl: inject('databaseUrl'),
    portBase: 18_880,
    token: TOKEN,
    smtpPort: sink.port,
    env: (service) => ({
      API_TOKENS_READ: `${TOKEN},${READ_TOKEN}`,
      API_TOKENS_OPERATE: `${TOKEN},${OPERATE_TOKEN}`,
      ...(service === 'sender' ? { PROVIDER_TIMEOUT_MS: '500', SMTP_FINAL_REPLY_TIMEOUT_MS: '800' } : {}),
      // A reply nobody answers for 3 s is a stall: the Stalled page has something to show.
      ...(service === 'liveness' ? { GRACE_INBOUND_MS: '3000', SWEEP_INTERVAL_MS: '300' } : {}),
    }),
  });
  dir = mkdtempSync(join(tmpdir(), 'console-e2e-'));
  const cheap = { N: 1024, r: 8, p: 1 } as const;
  const file = (name: string, text: string) => {
    writeFileSync(join(dir, name), text, { mode: 0o600 });
    return join(dir, name);
  };
  const users = file(
    'users',
    `ada operator ${await hashPassword(PASSWORDS.ada, cheap)}\nrita reader ${await hashPassword(PASSWORDS.rita, cheap)}\n`,
  );
  await stack.createTopics(3);
  for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) await stack.start(service);

  const port = await freePort();
  consoleUrl = `http://127.0.0.1:${port}`;
  consoleProc = startProcess(join(root, 'services', 'console', 'dist', 'server.js'), {
    PATH: process.env.PATH,
    DATABASE_URL: inject('databaseUrl'),
    DATABASE_SCHEMA: `${run}_console`,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: String(port),
    LOG_LEVEL: 'warn',
    PLANNER_URL: stack.url('planner', ''),
    SENDER_URL: stack.url('sender', ''),
    EXPERIMENT_URL: stack.url('experiment', ''),
    LIVENESS_URL: stack.url('liveness', ''),
    CONSOLE_READ_TOKEN_FILE: file('read-token', READ_TOKEN),
    CONSOLE_OPERATE_TOKEN_FILE: file('operate-token', OPERATE_TOKEN),
    CONSOLE_SESSION_KEY_FILE: file('session-key', 'k'.repeat(48)),
    CONSOLE_USERS_FILE: users,
    CONSOLE_COOKIE_SECURE: 'false',
    // A proxy network the test never comes from (TEST-NET-3): its headers must be ignored.
    CONSOLE_PROXY_CIDRS: '203.0.113.0/24',
    CONSOLE_PROXY_SECRET_FILE: file('proxy-secret', PROXY_SECRET),
    CONSOLE_PAGE_SIZE: '20',
    // The overview's outcome chart: a read of the sender's counters every second.
    CONSOLE_OUTCOME_SAMPLE_MS: '1000',
    // The dead-letter pages: the run's DLQs, read with the broker's (unsecured) access.
    KAFKA_BROKERS: inject('kafkaBrokers'),
    TOPIC_PREFIX: stack.prefix,
    ...(stack.registryUrl ? { SCHEMA_REGISTRY_URL: stack.registryUrl } : {}),
  });
  await waitFor(
    async () => {
      if (consoleProc.child.exitCode !== null) throw new Error(`console exited: ${consoleProc.stderrLines.join('\n')}`);
      return (await fetch(`${consoleUrl}/health/ready`).catch(() => undefined))?.ok;
    },
    { timeoutMs: 30_000, description: 'the console to report ready' },
  );

  // Another site (localhost is not 127.0.0.1): a page whose form posts to the console by itself.
  attacker = createServer((_request, response) => {
    response.setHeader('content-type', 'text/html');
    response.end(`<!doctype html><form id="f" method="post" action="${consoleUrl}/campaigns/pause">
<input name="campaignId" value="console-csrf"><input name="reason" value="forged"></form>
<script>document.getElementById('f').submit()</script>`);
  });
  await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
  attackerUrl = `http://localhost:${(attacker.address() as { port: number }).port}/`;

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => (attacker ? attacker.close(resolve) : resolve(undefined)));
  await consoleProc?.stop('SIGTERM');
  await stack?.stopAll('SIGKILL');
  await sink?.stop();
  await stack?.dropData(['planner', 'sender', 'experiment', 'liveness']);
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: inject('databaseUrl') });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${run}_console" CASCADE`);
  await client.end();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** A fresh browser context whose page fails the test on any dialog (an alert means script ran). */
async function newPage(
  extraHTTPHeaders?: Record<string, string>,
): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
  const context = await browser.newContext({ ...(extraHTTPHeaders ? { extraHTTPHeaders } : {}) });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('dialog', (dialog) => {
    problems.push(`dialog: ${dialog.message()}`);
    void dialog.dismiss();
  });
  // A CSP refusal on the console's own pages is a bug: nothing inline is meant to be there.
  page.on('console', (message) => {
    if (message.type() === 'error' && page.url().startsWith(consoleUrl)) problems.push(message.text());
  });
  return { context, page, problems };
}

/** Waits (up to 10 s) for the locator's text to equal, or contain, `expected`. */
async function text(locator: Locator, expected: string, how: 'is' | 'contains' = 'is'): Promise<void> {
  let last = '';
  await waitFor(
    async () => {
      last = (
        await locator
          .first()
          .innerText({ timeout: 1_000 })
          .catch(() => '')
      ).trim();
      return how === 'is' ? last === expected : last.includes(expected);
    },
    {
      timeoutMs: 10_000,
      intervalMs: 100,
      description: `text ${how} ${JSON.stringify(expected)} (last: ${JSON.stringify(last)})`,
    },
  );
}

async function signIn(page: Page, user: keyof typeof PASSWORDS, next = '/'): Promise<void> {
  await page.goto(`${consoleUrl}/login?next=${encodeURIComponent(next)}`);
  await page.fill('input[name=username]', user);
  await page.fill('input[name=password]', PASSWORDS[user]);
  await Promise.all([page.waitForURL((url) => !url.pathname.startsWith('/login')), page.click('button[type=submit]')]);
}

async function plannerStatus(requestId: string): Promise<string | undefined> {
  const response = await fetch(stack.url('planner', `/v1/outreach-requests/${requestId}`), {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  return response.ok ? ((await response.json()) as { status: string }).status : undefined;
}

async function request(requestId: string, campaignId: string, email: string): Promise<string> {
  const body = ingressBody(outreachRequest({ requestId, campaignId, candidateId: requestId, email }));
  const answer = await stack.json<{ sendId: string }>('planner', '/v1/outreach-requests', { method: 'POST', body });
  return answer.sendId;
}

async function senderSend(sendId: string): Promise<{ status: string } | undefined> {
  const response = await fetch(stack.url('sender', `/v1/sends/${sendId}`), {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  return response.ok ? ((await response.json()) as { status: string }) : undefined;
}

/** A reply on a conversation, through the planner's conversation-events route. */
async function reply(conversationId: string, campaignId: string, candidateKey: string): Promise<void> {
  await stack.json('planner', `/v1/conversations/${encodeURIComponent(conversationId)}/events`, {
    method: 'POST',
    body: { type: 'MessageReceived', campaignId, candidateKey, messageId: `inbox-${candidateKey}` },
  });
}

async function campaignPaused(campaignId: string): Promise<boolean> {
  return (await stack.json<{ paused: boolean }>('sender', `/v1/campaigns/${encodeURIComponent(campaignId)}`)).paused;
}

/** Pause or resume through the console's confirmation step. */
async function campaignAction(page: Page, campaignId: string, label: 'Pause…' | 'Resume…', reason: string) {
  await page.goto(`${consoleUrl}/campaigns?campaignId=${encodeURIComponent(campaignId)}`);
  await page.locator(`tr[data-campaign="${campaignId.replace(/["\\]/g, '\\$&')}"] a`, { hasText: label }).click();
  await text(page.getByTestId('confirm-campaign'), campaignId);
  await page.fill('textarea[name=reason]', reason);
  await page.getByTestId('confirm').click();
  await page.getByTestId('notice-ok').waitFor();
}

describe('the operations console in a browser', () => {
  it('signs an operator in, renders every page under its CSP, and sends the security headers', async () => {
    const { context, page, problems } = await newPage();
    await page.goto(`${consoleUrl}/ambiguous`);
    expect(new URL(page.url()).pathname).toBe('/login');
    await signIn(page, 'ada', '/ambiguous');
    expect(new URL(page.url()).pathname).toBe('/ambiguous');
    await text(page.getByTestId('whoami'), 'ada (operator)');

    for (const [path, title] of [
      ['/', 'Overview'],
      ['/campaigns', 'Campaigns'],
      ['/ambiguous', 'Ambiguous sends'],
      ['/sends', 'Send lookup'],
      ['/stalled', 'Stalled conversations'],
      ['/dlq', 'Dead letters'],
      ['/experiments', 'Experiments'],
      ['/audit', 'Audit'],
    ] as const) {
      const response = await page.goto(`${consoleUrl}${path}`);
      expect(response?.status(), path).toBe(200);
      await text(page.locator('h1'), title);
      const headers = response?.headers() ?? {};
      expect(headers['content-security-policy']).toMatch(/script-src 'self'.*frame-ancestors 'none'/);
      expect(headers['content-security-policy']).not.toMatch(/unsafe-inline|unsafe-eval/);
      expect(headers['x-frame-options']).toBe('DENY');
    }
    await page.goto(`${consoleUrl}/`);
    await text(page.getByTestId('kill-switch'), 'off');
    await text(page.getByTestId('ready-sender'), 'ready');
    expect(await page.evaluate(() => typeof (globalThis as { htmx?: unknown }).htmx)).toBe('object');

    // The session cookie: httpOnly, SameSite=Strict.
    const cookie = (await context.cookies()).find((c) => c.name === 'console_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(problems).toEqual([]);
    await context.close();
  });

  it('a pause holds the next send (the planner reports held) and a resume sends it (sent), both audited', async () => {
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada');
    await campaignAction(page, 'console-pause', 'Pause…', 'incident 7: wrong template');
    expect(await campaignPaused('console-pause')).toBe(true);

    await request('console-pause-1', 'console-pause', 'held-1@example.com');
    await waitFor(async () => (await plannerStatus('console-pause-1')) === 'held', {
      timeoutMs: 60_000,
      intervalMs: 300,
      description: 'the planner to report the request held',
    });
    await page.goto(`${consoleUrl}/campaigns?campaignId=console-pause`);
    await text(page.locator('tr[data-campaign="console-pause"] [data-testid=campaign-status]'), 'paused');

    await campaignAction(page, 'console-pause', 'Resume…', 'template fixed');
    await waitFor(async () => (await plannerStatus('console-pause-1')) === 'sent', {
      timeoutMs: 60_000,
      intervalMs: 300,
      description: 'the planner to report the request sent',
    });
    expect(sink.deliveredTo('held-1@example.com')).toHaveLength(1);

    await page.goto(`${consoleUrl}/audit`);
    const audit = page.getByTestId('audit');
    await text(audit, 'campaign.pause', 'contains');
    await text(audit, 'incident 7: wrong template', 'contains');
    await text(audit, 'campaign.resume', 'contains');
    await text(audit, 'ada (local)', 'contains');
    expect(problems).toEqual([]);
    await context.close();
  });

  it('resolves an ambiguous send from the work queue (the sender reports it sent); a second verdict shows the 409 and its reason', async () => {
    const sendId = await request('console-amb-1', 'console-amb', 'slow-1@example.com');
    await waitFor(async () => (await senderSend(sendId))?.status === 'ambiguous', {
      timeoutMs: 60_000,
      intervalMs: 300,
      description: 'the send to become ambiguous',
    });
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada', '/ambiguous?campaignId=console-amb');
    const row = page.locator(`tr[data-send="${sendId}"]`);
    await text(row, 'console-amb', 'contains');
    // A second tab with the same list: it will go stale.
    const stale = await context.newPage();
    await stale.goto(`${consoleUrl}/ambiguous?campaignId=console-amb`);

    await row.locator('select[name=resolution]').selectOption('sent');
    await row.locator('input[name=reason]').fill('found in the provider log');
    await row.locator('button', { hasText: 'Resolve' }).click();
    await text(page.getByTestId('notice-ok'), 'it is now sent', 'contains');
    expect((await senderSend(sendId))?.status).toBe('sent');

    const staleRow = stale.locator(`tr[data-send="${sendId}"]`);
    await staleRow.locator('select[name=resolution]').selectOption('retry');
    await staleRow.locator('input[name=reason]').fill('not in the log');
    await staleRow.locator('button', { hasText: 'Resolve' }).click();
    await text(stale.getByTestId('notice-refused'), '409', 'contains');
    await text(stale.getByTestId('notice-refused'), 'only an ambiguous send can be resolved', 'contains');
    expect((await senderSend(sendId))?.status).toBe('sent');

    // Send lookup, through htmx: the result swaps in.
    await page.goto(`${consoleUrl}/sends`);
    await page.fill('input[name=sendId]', sendId);
    await page.click('main button[type=submit]');
    await text(page.locator('#lookup-result [data-field=status]'), 'sent');
    expect(new URL(page.url()).searchParams.get('sendId')).toBe(sendId);

    await page.goto(`${consoleUrl}/audit`);
    await text(page.getByTestId('audit'), 'send.resolve.retry', 'contains');
    await text(page.getByTestId('audit'), 'refused', 'contains');
    expect(problems).toEqual([]);
    await context.close();
  });

  it('the overview: sends per second and outcomes sampled from /metrics, backlog, DLQ depth per topic, paused campaigns, each number a link', async () => {
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada');
    await campaignAction(page, 'console-paused-list', 'Pause…', 'for the overview');
    // Sends while the console samples the sender's counters every second.
    for (let i = 0; i < 5; i += 1) await request(`console-rate-${i}`, 'console-rate', `rate-${i}@example.com`);
    const sentInWindow = page.locator('[data-testid=outcome-totals] tr[data-outcome="sent"] [data-field=count]');
    await waitFor(
      async () => {
        await page.goto(`${consoleUrl}/`);
        if ((await page.getByTestId('outcome-chart').count()) === 0) return false;
        return Number((await sentInWindow.innerText().catch(() => '0')).trim()) >= 5;
      },
      { timeoutMs: 60_000, intervalMs: 1_000, description: 'five sends in the outcome chart' },
    );
    expect(
      await page.locator('[data-testid=outcome-chart] polyline, [data-testid=outcome-chart] circle').count(),
    ).toBeGreaterThan(0);
    expect(Number(await page.getByTestId('sends-per-second').innerText())).not.toBeNaN();
    // Backlog per service from each /metrics: the sender consumes and has an outbox.
    const sender = page.locator('[data-testid=backlog] tr[data-service="sender"]');
    expect(Number(await sender.locator('[data-field=lag]').innerText())).toBeGreaterThanOrEqual(0);
    expect(await sender.locator('[data-field=outbox-age]').innerText()).toMatch(/\d+ (s|min)/);
    expect(Number(await sender.locator('[data-field=parked]').innerText())).toBe(0);
    // DLQ depth per topic, the console's own reader; each depth opens its DLQ.
    const depths = page.locator('[data-testid=dlq-depths] tr[data-dlq]');
    expect(await depths.count()).toBeGreaterThan(3);
    expect(await depths.first().locator('a').getAttribute('href')).toMatch(/^\/dlq\?topic=/);
    expect(Number(await page.getByTestId('dlq-total').innerText())).toBeGreaterThanOrEqual(0);
    // Every card's number is a link to its list.
    for (const [id, href] of [
      ['ambiguous-count', '/ambiguous'],
      ['held-count', '/campaigns?held=true'],
      ['paused-count', '/campaigns?paused=true'],
      ['stalled-count', '/stalled'],
      ['dlq-total', '/dlq'],
      ['kill-switch', '/campaigns#kill-switch'],
    ] as const)
      expect(await page.getByTestId(id).getAttribute('href'), id).toBe(href);
    expect(Number(await page.getByTestId('paused-count').innerText())).toBeGreaterThanOrEqual(1);
    await page.getByTestId('paused-count').click();
    await page.waitForURL((url) => url.pathname === '/campaigns' && url.searchParams.get('paused') === 'true');
    const row = page.locator('tr[data-campaign="console-paused-list"]');
    await text(row.getByTestId('campaign-status'), 'paused');
    await text(row.locator('[data-field=reason]'), 'for the overview (console: ada)', 'contains');
    expect(problems).toEqual([]);
    await context.close();
  });

  it('lists every campaign a page at a time with its status, counts, held sends, error rate and reason', async () => {
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada', '/campaigns');
    const seen: string[] = [];
    let target: Locator | undefined;
    for (let pageNo = 0; pageNo < 10 && target === undefined; pageNo += 1) {
      const rows = page.locator('[data-testid=campaigns] tr[data-campaign]');
      for (const id of await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-campaign') ?? '')))
        seen.push(id);
      if (seen.includes('console-rate')) target = page.locator('tr[data-campaign="console-rate"]');
      else if ((await page.getByTestId('next-page').count()) > 0) await page.getByTestId('next-page').click();
      else break;
    }
    expect(target, `console-rate among ${seen.join(', ')}`).toBeDefined();
    expect(new Set(seen).size).toBe(seen.length); // no campaign twice across pages
    await text(target!.getByTestId('campaign-status'), 'running');
    await text(target!.locator('[data-field=counts]'), 'sent: 5', 'contains');
    await text(target!.locator('[data-field=held]'), '0');
    await text(target!.locator('[data-field=error-rate]'), '0.0% (0/5)');
    expect(await target!.locator('a', { hasText: 'Pause…' }).count()).toBe(1);
    expect(problems).toEqual([]);
    await context.close();
  });

  it("shows each ambiguous send's Message-ID, verdict wait and the follow-ups behind it, and resolves a selection at once", async () => {
    const followUps = ['f1', 'f2'].map((step) => ({
      step,
      delayMs: 86_400_000,
      contents: [{ variant: null, subject: 'Again', body: 'Still interested?' }],
    }));
    const sendIds: string[] = [];
    for (const i of [0, 1]) {
      const body = ingressBody(
        outreachRequest({
          requestId: `console-sel-${i}`,
          campaignId: 'console-sel',
          candidateId: `console-sel-${i}`,
          email: `slow-sel-${i}@example.com`,
          followUps,
        }),
      );
      sendIds.push(
        (await stack.json<{ sendId: string }>('planner', '/v1/outreach-requests', { method: 'POST', body })).sendId,
      );
    }
    await waitFor(async () => (await Promise.all(sendIds.map(senderSend))).every((s) => s?.status === 'ambiguous'), {
      timeoutMs: 60_000,
      intervalMs: 300,
      description: 'both sends ambiguous',
    });
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada', '/ambiguous?campaignId=console-sel');
    for (const sendId of sendIds) {
      const row = page.locator(`tr[data-send="${sendId}"]`);
      await text(row, 'console-sel', 'contains');
      expect(await row.locator('[data-field=message-id]').innerText()).toMatch(/^<[^@\s]+@[^>\s]+>$/);
      expect(await row.locator('[data-field=verdict-awaited]').innerText()).toMatch(/^(no|\d{4}-.+)$/);
      // Two follow-ups wait behind the intro: still in the sequence, or already scheduled.
      const waiting = (await row.locator('[data-field=waiting]').innerText()).match(
        /(\d+) follow-up\(s\), (\d+) other/,
      );
      expect(Number(waiting?.[1]) + Number(waiting?.[2])).toBe(2);
      await row.locator('input[type=checkbox]').check();
    }
    const form = page.getByTestId('resolve-selection');
    await form.locator('select[name=resolution]').selectOption('sent');
    await form.locator('input[name=reason]').fill('both in the provider log');
    await Promise.all([
      page.waitForURL((url) => url.pathname === '/ambiguous/resolve-selection'),
      form.locator('button', { hasText: 'Resolve the selection' }).click(),
    ]);
    expect(await page.locator('main').innerText()).toContain('2 of 2 resolved as sent');
    for (const sendId of sendIds) {
      await text(
        page.locator(`[data-testid=selection-results] tr[data-send="${sendId}"] [data-field=answer]`),
        'now sent',
      );
      expect((await senderSend(sendId))?.status).toBe('sent');
    }
    // Anything but picked sends in the form is refused 400, nothing resolved.
    const csrf = await page.locator('header input[name=_csrf]').inputValue();
    const stray = await context.request.post(`${consoleUrl}/ambiguous/resolve-selection`, {
      form: { _csrf: csrf, resolution: 'retry', reason: 'x', [`s-${sendIds[0]}`]: '1', campaignId: '1' },
      maxRedirects: 0,
    });
    expect(stray.status()).toBe(400);
    const none = await context.request.post(`${consoleUrl}/ambiguous/resolve-selection`, {
      form: { _csrf: csrf, resolution: 'retry', reason: 'x' },
      maxRedirects: 0,
    });
    expect(none.status()).toBe(400);
    expect(problems).toEqual([]);
    await context.close();
  });

  it('runs the seed incidents from the console alone: no duplicates, stop sending, settle the ambiguous sends after a crash, a stalled conversation and its timeline, the contaminated count', async () => {
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada');
    const campaign = async (campaignId: string) =>
      page.goto(`${consoleUrl}/campaigns?campaignId=${encodeURIComponent(campaignId)}`);

    // Seed 000-1: the batch re-runs after a restart; the re-run's request for the same candidate sends nothing.
    await request('console-seed-a', 'console-seed', 'seed-a@example.com');
    const rerun = ingressBody(
      outreachRequest({
        requestId: 'console-seed-a-rerun',
        campaignId: 'console-seed',
        candidateId: 'console-seed-a',
        email: 'seed-a@example.com',
      }),
    );
    await stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: rerun });
    await waitFor(
      async () => {
        await campaign('console-seed');
        return (await page.locator('tr[data-campaign="console-seed"] [data-field=counts]').innerText()).includes(
          'sent: 1',
        );
      },
      { timeoutMs: 60_000, intervalMs: 500, description: 'the first send recorded, seen from the console' },
    );
    await text(page.getByTestId('duplicates-total'), '0');
    expect(sink.deliveredTo('seed-a@example.com')).toHaveLength(1);

    // Seed 000-2: stop sending from the console; a new request is held, not mailed, until it restarts.
    await page.goto(`${consoleUrl}/campaigns#kill-switch`);
    await page.locator('a', { hasText: 'Stop all sending…' }).click();
    await page.fill('textarea[name=reason]', 'seed 000-2: two workers on one shard');
    await page.getByTestId('confirm').click();
    await page.getByTestId('notice-ok').waitFor();
    await page.goto(`${consoleUrl}/`);
    await text(page.getByTestId('kill-switch'), 'ON: all sending stopped');
    await request('console-seed-b', 'console-seed', 'seed-b@example.com');
    await waitFor(
      async () => {
        await campaign('console-seed');
        return (await page.locator('tr[data-campaign="console-seed"] [data-field=held]').innerText()).trim() === '1';
      },
      { timeoutMs: 60_000, intervalMs: 500, description: 'the new request held, seen from the console' },
    );
    expect(sink.deliveredTo('seed-b@example.com')).toHaveLength(0);
    await page.goto(`${consoleUrl}/campaigns#kill-switch`);
    await page.locator('a', { hasText: 'Restart sending…' }).click();
    await page.fill('textarea[name=reason]', 'leases fixed');
    await page.getByTestId('confirm').click();
    await text(page.getByTestId('notice-ok'), '1 held send(s) released', 'contains');
    await waitFor(async () => sink.deliveredTo('seed-b@example.com').length === 1, {
      timeoutMs: 60_000,
      description: 'the held send mailed once',
    });

    // A crash mid-send: the sender is killed while the provider has the mail; after the restart its
    // lease lapses and the send waits, ambiguous, in the console's work queue.
    const crashed = await request('console-seed-crash', 'console-seed-crash', 'slow-crash@example.com');
    await waitFor(async () => (await senderSend(crashed))?.status === 'sending', {
      timeoutMs: 30_000,
      intervalMs: 10,
      description: 'the send at the provider',
    });
    await stack.stop('sender', 'SIGKILL');
    await stack.start('sender');
    const row = page.locator(`tr[data-send="${crashed}"]`);
    await waitFor(
      async () => {
        await page.goto(`${consoleUrl}/ambiguous?campaignId=console-seed-crash`);
        return (await row.count()) === 1;
      },
      { timeoutMs: 60_000, intervalMs: 500, description: 'the crashed send in the work queue' },
    );
    await text(row.locator('[data-field=reason]'), 'lease expired while sending', 'contains');
    expect(await row.locator('[data-field=message-id]').innerText()).toMatch(/^<.+@.+>$/);
    await row.locator('input[type=checkbox]').check();
    const form = page.getByTestId('resolve-selection');
    await form.locator('select[name=resolution]').selectOption('sent');
    await form.locator('input[name=reason]').fill('in the provider log after the crash');
    await Promise.all([
      page.waitForURL((url) => url.pathname === '/ambiguous/resolve-selection'),
      form.locator('button', { hasText: 'Resolve the selection' }).click(),
    ]);
    expect(await page.locator('main').innerText()).toContain('1 of 1 resolved as sent');
    expect((await senderSend(crashed))?.status).toBe('sent');

    // Seed 003: a conversation with no next step, found from the overview, and its timeline.
    await reply('console-seed-stall:cand-1', 'console-seed-stall', 'cand-1');
    const stalled = page.locator('tr[data-conversation="console-seed-stall:cand-1"]');
    await waitFor(
      async () => {
        await page.goto(`${consoleUrl}/`);
        await page.getByTestId('stalled-count').click();
        await page.waitForURL((url) => url.pathname === '/stalled');
        await page.goto(`${consoleUrl}/stalled?campaignId=console-seed-stall`);
        return (await stalled.count()) === 1;
      },
      { timeoutMs: 30_000, intervalMs: 500, description: 'the conversation listed as stalled' },
    );
    await text(stalled.locator('[data-field=reason]'), 'no_next_step');
    await stalled.locator('a').click();
    await text(page.locator('[data-testid=timeline] [data-field=type]'), 'MessageReceived');

    // Seed 000-3: the contaminated count of a test.
    await stack.json('experiment', '/v1/experiments', {
      method: 'POST',
      body: {
        experimentId: 'console-seed-exp',
        variants: [
          { name: 'a', weight: 1 },
          { name: 'b', weight: 1 },
        ],
      },
    });
    await stack.json('experiment', '/v1/experiments/console-seed-exp/assignments', {
      method: 'POST',
      body: { candidateIds: ['seed-exp-1', 'seed-exp-2'] },
    });
    await page.goto(`${consoleUrl}/experiments?experimentId=console-seed-exp`);
    await text(page.getByTestId('contaminated'), '0');
    expect(problems).toEqual([]);
    await context.close();
  });

  it('a reader sees no action, and its POST is refused 403 even with its own CSRF token', async () => {
    const { context, page } = await newPage();
    await signIn(page, 'rita', '/campaigns?campaignId=console-readonly');
    await text(page.getByTestId('whoami'), 'rita (reader)');
    await page.locator('tr[data-campaign="console-readonly"]').waitFor();
    expect(await page.locator('main a', { hasText: /Pause…|Resume…|Stop all|Restart/ }).count()).toBe(0);
    expect(await page.locator('main form[method=post]').count()).toBe(0);
    await page.goto(`${consoleUrl}/ambiguous`);
    expect(await page.locator('main button', { hasText: 'Resolve' }).count()).toBe(0);

    const csrf = await page.locator('header input[name=_csrf]').inputValue();
    const refused = await context.request.post(`${consoleUrl}/campaigns/pause`, {
      form: { _csrf: csrf, campaignId: 'console-readonly', reason: 'a reader tries' },
      maxRedirects: 0,
    });
    expect(refused.status()).toBe(403);
    expect(await refused.text()).toContain('your role may only read');
    const kill = await context.request.post(`${consoleUrl}/sending`, {
      form: { _csrf: csrf, paused: 'true', reason: 'a reader tries' },
      maxRedirects: 0,
    });
    expect(kill.status()).toBe(403);
    expect(await campaignPaused('console-readonly')).toBe(false);
    expect(await (await stack.json<{ paused: boolean }>('sender', '/v1/sending')).paused).toBe(false);
    await context.close();
  });

  it('refuses a cross-site form and a POST without the CSRF token', async () => {
    const { context, page } = await newPage();
    await signIn(page, 'ada');
    // The attacker's page posts a pause to the console as soon as it loads.
    const posted = page.waitForResponse((r) => r.url() === `${consoleUrl}/campaigns/pause`);
    await page.goto(attackerUrl);
    expect((await posted).status()).toBe(403);
    // Same site, the operator's own cookie, no token.
    const noToken = await context.request.post(`${consoleUrl}/campaigns/pause`, {
      form: { campaignId: 'console-csrf', reason: 'no token' },
      maxRedirects: 0,
    });
    expect(noToken.status()).toBe(403);
    const wrongToken = await context.request.post(`${consoleUrl}/campaigns/pause`, {
      form: { _csrf: 'x'.repeat(43), campaignId: 'console-csrf', reason: 'wrong token' },
      maxRedirects: 0,
    });
    expect(wrongToken.status()).toBe(403);
    expect(await campaignPaused('console-csrf')).toBe(false);
    await context.close();
  });

  it('ignores proxy headers from an address outside the proxy CIDR, even with the right secret', async () => {
    const { context, page } = await newPage({
      'x-forwarded-email': 'mallory@example.com',
      'x-forwarded-groups': 'outreach-operators',
      'x-console-proxy-secret': PROXY_SECRET,
    });
    await page.goto(`${consoleUrl}/campaigns`);
    expect(new URL(page.url()).pathname).toBe('/login');
    expect(await page.locator('[data-testid=whoami]').count()).toBe(0);
    const post = await context.request.post(`${consoleUrl}/sending`, {
      form: { paused: 'true', reason: 'forged' },
      maxRedirects: 0,
    });
    expect(post.status()).toBe(403);
    await context.close();
  });

  it('renders script in a reason and in a campaign id as text', async () => {
    const { context, page, problems } = await newPage();
    await signIn(page, 'ada');
    const payload = '<script>alert("reason")</script><img src=x onerror="alert(1)">';
    await campaignAction(page, 'console-xss', 'Pause…', payload);
    await page.goto(`${consoleUrl}/campaigns?campaignId=console-xss`);
    const row = page.locator('tr[data-campaign="console-xss"]');
    await text(row, '<script>alert("reason")</script>', 'contains');
    expect(await row.locator('img, script').count()).toBe(0);

    const hostileId = '<script>alert("id")</script>';
    await page.goto(`${consoleUrl}/campaigns?campaignId=${encodeURIComponent(hostileId)}`);
    await text(page.locator('main'), hostileId, 'contains');
    expect(await page.locator('main script').count()).toBe(0);

    await page.goto(`${consoleUrl}/audit`);
    await text(page.getByTestId('audit'), payload, 'contains');
    expect(await page.locator('main img, main script').count()).toBe(0);
    expect(problems.filter((p) => p.startsWith('dialog'))).toEqual([]);
    await context.close();
  });

  it('looks a send up by request id (status and rejection reason), by candidate, and by address in a POST body only', async () => {
    const sendId = await request('console-look-1', 'console-look', 'look-1@example.com');
    await waitFor(async () => (await plannerStatus('console-look-1')) === 'sent', {
      timeoutMs: 60_000,
      intervalMs: 300,
      description: 'the first request sent',
    });
    // A request naming no experiment: the planner rejects it, and records why.
    const rejected = ingressBody(
      outreachRequest({
        requestId: 'console-look-2',
        campaignId: 'console-look',
        candidateId: 'console-look-2',
        email: 'look-2@example.com',
        experimentId: 'no-such-experiment',
      }),
    );
    const refusal = await fetch(stack.url('planner', '/v1/outreach-requests'), {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(rejected),
    });
    expect(refusal.status).toBe(422);
    await waitFor(async () => (await plannerStatus('console-look-2')) === 'rejected', {
      timeoutMs: 30_000,
      intervalMs: 300,
      description: 'the second request rejected',
    });
    const { context, page, problems } = await newPage();
    await signIn(page, 'rita', '/sends');

    await page.getByTestId('by-request').locator('input[name=requestId]').fill('console-look-2');
    await page.getByTestId('by-request').locator('button').click();
    await text(page.locator('[data-testid=request] [data-field=status]'), 'rejected');
    await text(page.locator('[data-testid=request] [data-field=rejection]'), 'unknown_experiment');
    await text(page.locator('[data-testid=request] [data-field=rejection-detail]'), 'experimentId names no experiment');

    await page.goto(`${consoleUrl}/sends?requestId=console-look-1`);
    await text(page.locator(`[data-testid=request-sends] tr[data-send="${sendId}"] [data-field=status]`), 'sent');

    const byCandidate = page.getByTestId('by-candidate');
    await byCandidate.locator('input[name=campaignId]').fill('console-look');
    await byCandidate.locator('input[name=candidateId]').fill('console-look-1');
    await byCandidate.locator('button').click();
    await text(page.locator('[data-testid=check] [data-field=sendId]'), sendId);
    await text(page.locator('[data-testid=existing] [data-field=status]'), 'sent');

    // By address: a reader may (the read scope), the address only in the body, never in the URL.
    const byAddress = page.getByTestId('by-address');
    await byAddress.locator('input[name=campaignId]').fill('console-look');
    await byAddress.locator('input[name=email]').fill('LOOK-1@example.com');
    await byAddress.locator('button').click();
    await text(page.locator('[data-testid=existing] [data-field=sendId]'), sendId);
    await text(page.locator('[data-testid=check] [data-field=alreadySent]'), 'yes');
    expect(page.url()).not.toContain('@');
    expect(page.url()).not.toContain('look-1');
    expect(await page.locator('main').innerText()).not.toContain('look-1@example.com');
    expect(problems).toEqual([]);
    // An address given as a candidate id in a link is refused: it would sit in the history and the logs.
    const linked = await page.goto(`${consoleUrl}/sends?campaignId=console-look&candidateId=look-1%40example.com`);
    expect(linked?.status()).toBe(400);
    await text(page.getByTestId('notice-refused'), 'address form', 'contains');
    await context.close();

    // Without a session there is no scope to read with: refused before the sender is asked.
    const anonymous = await browser.newContext();
    const refused = await anonymous.request.post(`${consoleUrl}/sends/by-address`, {
      form: { campaignId: 'console-look', step: 'intro', email: 'look-1@example.com' },
      maxRedirects: 0,
    });
    expect(refused.status()).toBe(403);
    expect(await refused.text()).not.toContain('look-1@example.com');
    await anonymous.close();
    // The sender answers an address check to the read scope only: the console's operate token is refused.
    const operateOnly = await fetch(
      stack.url(
        'sender',
        '/v1/sends/check?campaignId=console-look&candidateId=x&step=intro&email=look-1%40example.com',
      ),
      { headers: { authorization: `Bearer ${OPERATE_TOKEN}` } },
    );
    expect(operateOnly.status).toBe(403);
    // And the console's log never holds the address.
    expect([...consoleProc.stdoutLines, ...consoleProc.stderrLines].join('\n')).not.toMatch(/look-1@example\.com/i);
  });

  it('lists a stalled conversation by campaign, reason and age, and opens its timeline with the graces that applied', async () => {
    await reply('console-stall:cand-1', 'console-stall', 'cand-1');
    const { context, page, problems } = await newPage();
    await signIn(page, 'rita', '/stalled?campaignId=console-stall');
    const row = page.locator('tr[data-conversation="console-stall:cand-1"]');
    await waitFor(
      async () => {
        await page.goto(`${consoleUrl}/stalled?campaignId=console-stall&reason=no_next_step`);
        return (await row.count()) === 1;
      },
      { timeoutMs: 30_000, intervalMs: 500, description: 'the conversation listed as stalled' },
    );
    await text(row.locator('[data-field=reason]'), 'no_next_step');
    // The other reason, and an age it has not reached, list nothing.
    await page.goto(`${consoleUrl}/stalled?campaignId=console-stall&reason=next_step_overdue`);
    await page.getByTestId('stalled-empty').waitFor();
    await page.goto(`${consoleUrl}/stalled?campaignId=console-stall&minAgeMinutes=60`);
    await page.getByTestId('stalled-empty').waitFor();

    await page.goto(`${consoleUrl}/stalled?campaignId=console-stall`);
    await row.locator('a').click();
    await text(page.locator('h1'), 'Conversation');
    await text(page.locator('[data-testid=timeline] [data-field=type]'), 'MessageReceived');
    await text(page.locator('[data-testid=graces] [data-field=inbound]'), '3 s');
    await text(page.locator('[data-testid=graces] [data-field=source]'), "the service's defaults");
    await text(page.getByTestId('applied-grace'), 'inbound: 3 s', 'contains');
    expect(problems).toEqual([]);
    await context.close();
  });

  it("shows an experiment's variant balance and reply rate per variant with intervals, the SRM p-value and contamination, as SVG charts", async () => {
    await stack.json('experiment', '/v1/experiments', {
      method: 'POST',
      body: {
        experimentId: 'console-exp',
        variants: [
          { name: 'short', weight: 1 },
          { name: 'personal', weight: 1 },
        ],
      },
    });
    await stack.json('experiment', '/v1/experiments/console-exp/assignments', {
      method: 'POST',
      body: { candidateIds: Array.from({ length: 40 }, (_, i) => `exp-cand-${i}`) },
    });
    // Four of them are sent the experiment's message through the planner and the sender, and two reply
    // through the planner's conversation route: MessageReceived on the log, attributed by the experiment service.
    const sent = ['exp-cand-0', 'exp-cand-1', 'exp-cand-2', 'exp-cand-3'];
    for (const candidateId of sent)
      await stack.json('planner', '/v1/outreach-requests', {
        method: 'POST',
        body: ingressBody(
          outreachRequest({
            requestId: `console-exp-${candidateId}`,
            campaignId: 'console-exp-camp',
            candidateId,
            email: `${candidateId}@example.com`,
            experimentId: 'console-exp',
            contents: [
              { variant: 'short', subject: 'A role', body: 'Talk?' },
              { variant: 'personal', subject: 'A role for you', body: 'Would you like to talk about a role?' },
            ],
          }),
        ),
      });
    type Variants = { variants: Array<{ variant: string; exposedCandidates: number; repliedCandidates: number }> };
    const report = () => stack.json<Variants>('experiment', '/v1/experiments/console-exp/report');
    const total = (r: Variants, field: 'exposedCandidates' | 'repliedCandidates') =>
      r.variants.reduce((sum, v) => sum + v[field], 0);
    await waitFor(async () => total(await report(), 'exposedCandidates') === 4, {
      timeoutMs: 60_000,
      intervalMs: 300,
      description: "the experiment's four sends exposed",
    });
    await reply('console-exp-camp:exp-cand-0', 'console-exp-camp', 'exp-cand-0');
    await reply('console-exp-camp:exp-cand-1', 'console-exp-camp', 'exp-cand-1');
    await reply('another-camp:exp-cand-2', 'another-camp', 'exp-cand-2'); // another campaign: not this experiment's
    await waitFor(async () => total(await report(), 'repliedCandidates') === 2, {
      timeoutMs: 30_000,
      intervalMs: 300,
      description: 'the two replies attributed',
    });
    const expected = (await report()).variants;
    const { context, page, problems } = await newPage();
    await signIn(page, 'rita', '/experiments?experimentId=console-exp');
    await text(page.getByTestId('assigned-total'), '40');
    const p = Number(await page.getByTestId('srm-p').innerText());
    expect(p).toBeGreaterThanOrEqual(0);
    expect(p).toBeLessThanOrEqual(1);
    await text(page.getByTestId('contaminated'), '0');
    const assigned = await page.locator('[data-testid=variants] [data-field=assigned]').allInnerTexts();
    expect(assigned.map(Number).reduce((a, b) => a + b, 0)).toBe(40);
    // Two charts: the balance and the reply rate.
    expect(await page.locator('svg.chart').count()).toBe(2);
    expect(await page.locator('svg.chart rect').count()).toBe(4);
    await text(page.locator('[data-testid=variants] tr[data-variant=short] [data-field=interval]'), '–', 'contains');
    for (const v of expected) {
      const row = page.locator(`[data-testid=reply-rate] tr[data-variant=${v.variant}]`);
      await text(row.locator('[data-field=exposed]'), String(v.exposedCandidates));
      await text(row.locator('[data-field=replied]'), String(v.repliedCandidates));
      if (v.exposedCandidates > 0) {
        await text(
          row.locator('[data-field=rate]'),
          `${((v.repliedCandidates / v.exposedCandidates) * 100).toFixed(1)}%`,
        );
        const [low, high] = (await row.locator('[data-field=interval]').innerText())
          .split('–')
          .map((x) => parseFloat(x));
        expect(low).toBeLessThanOrEqual((v.repliedCandidates / v.exposedCandidates) * 100);
        expect(high).toBeGreaterThanOrEqual((v.repliedCandidates / v.exposedCandidates) * 100);
      }
    }
    expect(problems).toEqual([]);
    const missing = await page.goto(`${consoleUrl}/experiments?experimentId=no-such-experiment`);
    expect(missing?.status()).toBe(404);
    await text(page.getByTestId('notice-refused'), '404', 'contains');
    await context.close();
  });

  it('browses a DLQ (code, headers, payload masked, script as text); a dry run changes nothing, the replay does, and none without a dry run', async () => {
    const kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'console-e2e' });
    const producer = new EventProducer(kafka);
    // No service of the stack consumes the rejections topic: a replay there disturbs nothing.
    const source = `${stack.prefix}outreach.rejected.v1`;
    const dlq = `${source}.dlq`;
    // No double quote: the payload is shown as JSON, which would escape one.
    const script = "<script>alert('dlq')</script><img src=x onerror=alert(2)>";
    await producer.publishRaw([
      {
        topic: dlq,
        records: [
          {
            key: 'dlq-1',
            value: Buffer.from(
              JSON.stringify({
                requestId: 'dlq-1',
                email: 'ada@example.com',
                candidateName: 'Ada Lovelace',
                note: script,
              }),
            ),
            headers: {
              'dlq-error-code': 'HANDLER',
              'dlq-reason': 'the handler failed for ada@example.com',
              'dlq-source-topic': source,
              'dlq-consumer-group': 'console-e2e',
            },
          },
          {
            key: 'dlq-2',
            value: Buffer.from('not json, for bob@example.com'),
            headers: { 'dlq-error-code': 'DECODE', 'dlq-reason': 'undecodable', 'dlq-source-topic': source },
          },
        ],
      },
    ]);
    await producer.disconnect();
    const admin = kafka.admin();
    await admin.connect();
    const sourceEnd = async () => (await admin.fetchTopicOffsets(source)).reduce((n, p) => n + Number(p.high), 0);
    try {
      const before = await sourceEnd();
      const { context, page, problems } = await newPage();
      await signIn(page, 'ada', '/dlq');
      await text(page.locator(`tr[data-dlq="${dlq}"] [data-field=depth]`), '2');
      await page.locator(`tr[data-dlq="${dlq}"] a`).click();
      const records = page.getByTestId('dlq-records');
      await text(records, 'HANDLER', 'contains');
      await text(records, script, 'contains');
      await text(records, 'DECODE', 'contains');
      const shown = await page.locator('main').innerText();
      for (const hidden of ['ada@example.com', 'bob@example.com', 'Ada Lovelace']) expect(shown).not.toContain(hidden);
      expect(shown).toContain('[masked]');
      expect(await page.locator('main script, main img').count()).toBe(0);

      // The dry run: counts the HANDLER record, publishes and commits nothing.
      const dryRun = page.getByTestId('dry-run-form');
      await dryRun.locator('input[name=code]').fill('HANDLER');
      await dryRun.locator('input[name=reason]').fill('the handler is fixed');
      await page.getByTestId('dry-run').click();
      await text(page.getByTestId('dry-run-count'), '1');
      expect(await sourceEnd()).toBe(before);
      const committed = await admin.fetchOffsets({ groupId: `dlq-replay.${dlq}`, topics: [dlq] });
      expect(committed[0]?.partitions.every((p) => p.offset === '-1')).toBe(true);

      // A forged permission, and a reader, are refused; nothing moves.
      const csrf = await page.locator('header input[name=_csrf]').inputValue();
      const forged = await context.request.post(`${consoleUrl}/dlq/replay`, {
        form: {
          _csrf: csrf,
          topic: dlq,
          code: 'HANDLER',
          reason: 'skip the dry run',
          permit: `${Date.now() + 60_000}.x`,
        },
        maxRedirects: 0,
      });
      expect(forged.status()).toBe(409);
      const other = await context.request.post(`${consoleUrl}/dlq/replay`, {
        form: {
          _csrf: csrf,
          topic: dlq,
          code: 'DECODE',
          reason: 'another code',
          permit: await page.locator('input[name=permit]').inputValue(),
        },
        maxRedirects: 0,
      });
      expect(other.status()).toBe(409);
      expect(await sourceEnd()).toBe(before);

      // The replay the dry run permits: the one HANDLER record goes back to its source topic.
      await page.getByTestId('replay-form').locator('input[name=reason]').fill('the handler is fixed');
      await page.getByTestId('replay').click();
      await text(page.getByTestId('replayed-count'), '1');
      expect(await sourceEnd()).toBe(before + 1);

      await page.goto(`${consoleUrl}/audit`);
      await text(page.getByTestId('audit'), 'dlq.replay.dry-run', 'contains');
      await text(page.getByTestId('audit'), 'no valid dry run', 'contains');
      expect(problems).toEqual([]);
      await context.close();

      const reader = await newPage();
      await signIn(reader.page, 'rita', `/dlq?topic=${encodeURIComponent(dlq)}`);
      expect(await reader.page.getByTestId('dry-run-form').count()).toBe(0);
      const readerCsrf = await reader.page.locator('header input[name=_csrf]').inputValue();
      const refused = await reader.context.request.post(`${consoleUrl}/dlq/replay`, {
        form: { _csrf: readerCsrf, topic: dlq, reason: 'a reader tries' },
        maxRedirects: 0,
      });
      expect(refused.status()).toBe(403);
      await reader.context.close();
      expect(await sourceEnd()).toBe(before + 1);
      // The console's log holds no address from the records.
      expect([...consoleProc.stdoutLines, ...consoleProc.stderrLines].join('\n')).not.toMatch(/@example\.com/);
    } finally {
      await admin.disconnect();
    }
  });
});
