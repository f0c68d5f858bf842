/**
 * `npm run chaos`: the reliability suite. Each scenario starts from a clean state (its own topics,
 * schemas and SMTP sink), runs the planner and the sender as processes, drives requests through the
 * public ingress (the `outreach.requested` topic, and the planner's HTTP endpoint), injects one fault
 * into real processes, and then checks the SMTP sink's deliveries against the sender's sent log:
 *
 *   duplicates  emails delivered more than once for one send or one campaign+address+step: must be 0
 *   lost        requests without exactly one terminal outcome in the sent log: must be 0
 *   ambiguous   sends whose provider call may or may not have happened: at most the sends in flight
 *               at the faults (concurrency × processes hit)
 *   mismatched  `sent` rows with no delivery, or deliveries recorded as failed, suppressed or not at all: 0
 *
 *   npm run chaos                       the full configuration (3,000 requests × 8 scenarios)
 *   npm run chaos -- --config short     a few hundred per scenario (part of `npm test`)
 *   npm run chaos -- --only kafka-restart,postgres-restart
 *
 * It writes reports/chaos/<config>.json and .md, prints the table, and exits 1 on any violation.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  createKafka,
  EventProducer,
  normalizeCandidateKey,
  sendIdFor,
  topicName,
  type OutreachRequested,
} from '@outreach/shared';
import { freePort, SmtpSink, waitFor, type SmtpHostility } from '@outreach/shared/testing';
import pg from 'pg';
import {
  purgeOwnedPostgres,
  startKafka,
  startOwnedPostgres,
  stopKafka,
  stopOwnedPostgres,
  up,
  type KafkaInstance,
  type PostgresInstance,
} from './infra.js';
import { describeMachine, machineMarkdown, type MachineDescription } from './lib/machine.js';
import { ingressBody, outreachRequest, Stack } from './lib/stack.js';

type Kafka = ReturnType<typeof createKafka>;
const root = join(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: {
    config: { type: 'string', default: process.env.CHAOS_CONFIG ?? 'full' },
    only: { type: 'string' },
    'port-base': { type: 'string', default: process.env.CHAOS_PORT_BASE ?? '8180' },
  },
});
const configs = {
  short: { requests: 300, timeoutMs: 240_000 },
  full: { requests: 3_000, timeoutMs: 900_000 },
} as const;
if (!(args.config in configs)) throw new Error(`--config must be one of ${Object.keys(configs).join(', ')}`);
const configName = args.config as keyof typeof configs;
const config = configs[configName];
const CONCURRENCY = 8;
const CAMPAIGN = 'chaos';

function say(message: string): void {
  process.stdout.write(`[chaos] ${message}\n`);
}

/** What a scenario can reach while it runs. */
interface Run {
  readonly stack: Stack;
  readonly sink: SmtpSink;
  readonly kafka: Kafka;
  readonly requests: readonly OutreachRequested[];
  /** Resolves once the SMTP sink has at least this share of the requests delivered. */
  progress(share: number): Promise<void>;
  /** Through the topic (a `fresh` producer sees new partitions at once), or the planner's HTTP endpoint. */
  publish(requests: readonly OutreachRequested[], options?: { fresh?: boolean; via?: 'http' }): Promise<void>;
  /** Resolves once the sender's readiness route reports it unready, or after `timeoutMs` (returns false). */
  senderNoticesOutage(timeoutMs: number): Promise<boolean>;
  /** Stop, stay down until the sender reports it unready (at most 15 s), start. True if it noticed. */
  restartKafka?(): Promise<boolean>;
  restartPostgres?(): Promise<boolean>;
  note(text: string): void;
}

interface Scenario {
  readonly name: string;
  readonly fault: string;
  readonly partitions?: number;
  readonly sinkDelayMs?: number;
  /** How the SMTP sink misbehaves in transaction `n`; each time it does adds one to the ambiguous bound. */
  readonly hostile?: (n: number) => SmtpHostility | undefined;
  readonly ownKafka?: boolean;
  readonly ownPostgres?: boolean;
  /** Starts the processes and publishes the load (default: one planner, one sender, each request once). */
  readonly load?: (run: Run) => Promise<void>;
  /** Injects the fault; returns how many sends could have been in flight at it. */
  readonly inject: (run: Run) => Promise<number>;
}

async function startDefault(run: Run): Promise<void> {
  await run.stack.start('planner');
  await run.stack.start('sender');
  await run.publish(run.requests);
}

const scenarios: Scenario[] = [
  {
    name: 'sender-sigkill-x5',
    fault: 'the sender is SIGKILLed at five random points and restarted after each',
    sinkDelayMs: 10,
    async inject(run) {
      const points = Array.from({ length: 5 }, () => 0.1 + Math.random() * 0.75).sort((a, b) => a - b);
      for (const point of points) {
        await run.progress(point);
        await run.stack.stop('sender', 'SIGKILL');
        await run.stack.start('sender');
      }
      run.note(`kills at ${points.map((p) => `${Math.round(p * 100)}%`).join(', ')} of deliveries`);
      return points.length * CONCURRENCY;
    },
  },
  {
    name: 'hostile-smtp',
    fault:
      'the SMTP server receives every 20th message in full and closes the connection without answering the final dot, while the sender is SIGKILLed three times',
    sinkDelayMs: 10,
    hostile: (n) => (n % 20 === 0 ? { at: 'dot', act: 'drop' } : undefined),
    async inject(run) {
      const points = Array.from({ length: 3 }, () => 0.15 + Math.random() * 0.7).sort((a, b) => a - b);
      for (const point of points) {
        await run.progress(point);
        await run.stack.stop('sender', 'SIGKILL');
        await run.stack.start('sender');
      }
      run.note(`kills at ${points.map((p) => `${Math.round(p * 100)}%`).join(', ')} of deliveries`);
      return points.length * CONCURRENCY;
    },
  },
  {
    name: 'two-senders-rebalancing',
    fault: 'a second sender joins, the first leaves (SIGTERM) and rejoins, under a slow provider (40 ms a message)',
    sinkDelayMs: 40,
    async inject(run) {
      await run.progress(0.2);
      await run.stack.start('sender', { instance: 1 });
      await run.progress(0.5);
      await run.stack.stop('sender', 'SIGTERM');
      await run.progress(0.7);
      await run.stack.start('sender');
      run.note('joins at 20% and 70%, a graceful leave at 50%');
      // A graceful leave finishes its sends before it gives up its partitions: nothing is in doubt.
      return 0;
    },
  },
  {
    name: 'kafka-restart',
    fault: "the Kafka broker (the suite's own) is stopped and started again mid-run",
    ownKafka: true,
    sinkDelayMs: 10,
    async inject(run) {
      await run.progress(0.3);
      const started = Date.now();
      const noticed = await run.restartKafka?.();
      run.note(
        `broker down and back in ${((Date.now() - started) / 1000).toFixed(1)} s at 30% of deliveries; the sender ${noticed ? 'reported itself unready meanwhile' : 'stayed ready throughout'}`,
      );
      return CONCURRENCY;
    },
  },
  {
    name: 'postgres-restart',
    fault: "PostgreSQL (the suite's own instance) is stopped (fast shutdown) and started again mid-run",
    ownPostgres: true,
    sinkDelayMs: 10,
    async inject(run) {
      await run.progress(0.3);
      const started = Date.now();
      const noticed = await run.restartPostgres?.();
      run.note(
        `database down and back in ${((Date.now() - started) / 1000).toFixed(1)} s at 30% of deliveries; the sender ${noticed ? 'reported itself unready meanwhile' : 'stayed ready throughout'}`,
      );
      // The provider's answers are known: recording them is retried until the database is back, so a
      // restart shorter than a lease leaves no send in doubt.
      return 0;
    },
  },
  {
    name: 'triple-publish-variants',
    fault:
      'every request arrives three times: as sent, with its address upper-cased and both ids padded with spaces, and through HTTP with a mixed-case address',
    async load(run) {
      await run.stack.start('planner');
      await run.stack.start('sender');
      const padded = run.requests.map((r) => ({
        ...r,
        eventId: randomUUID(),
        candidateId: `  ${r.candidateId} `,
        email: ` ${r.email.toUpperCase()}  `,
      }));
      await run.publish(run.requests);
      await run.publish(padded);
      const mixedCase = run.requests.map((r) => ({
        ...r,
        email: r.email.replace(/^c/, 'C').replace('example.com', 'Example.COM'),
      }));
      await run.publish(mixedCase, { via: 'http' });
      run.note(`${run.requests.length * 3} requests published for ${run.requests.length} sends`);
    },
    inject: () => Promise.resolve(0),
  },
  {
    name: 'partition-increase',
    fault:
      'outreach.requested and send.requested grow from 2 to 6 partitions mid-run; the rest of the load and a copy of the first third follow',
    partitions: 2,
    sinkDelayMs: 5,
    async load(run) {
      await run.stack.start('planner');
      await run.stack.start('sender');
      await run.publish(run.requests.slice(0, Math.floor(run.requests.length * 0.6)));
    },
    async inject(run) {
      await run.progress(0.3);
      const admin = run.kafka.admin();
      await admin.connect();
      await admin.createPartitions({
        topicPartitions: (['outreachRequested', 'sendRequested'] as const).map((id) => ({
          topic: topicName(id, run.stack.prefix),
          count: 6,
        })),
      });
      await admin.disconnect();
      // A fresh producer sees the new partitions at once: the keys of the rest now hash over six.
      const rest = run.requests.slice(Math.floor(run.requests.length * 0.6));
      const again = run.requests.slice(0, Math.floor(run.requests.length / 3)).map((r) => ({
        ...r,
        eventId: randomUUID(),
      }));
      await run.publish([...rest, ...again], { fresh: true });
      run.note(
        `${rest.length} new and ${again.length} repeated requests after the increase; the consumers found the new partitions by metadata refresh, with no restart`,
      );
      return 0;
    },
  },
  {
    name: 'skewed-clock-sender',
    fault:
      "one of two senders runs with its system clock 2 hours ahead (libfaketime, or a Node clock shim if it isn't installed)",
    sinkDelayMs: 10,
    async load(run) {
      await run.stack.start('planner');
      const skew = skewedClock('+2h', 2 * 3_600_000);
      const skewed = await run.stack.start('sender', { instance: 1, env: { ...skew.env, LOG_LEVEL: 'info' } });
      await run.stack.start('sender');
      await run.publish(run.requests);
      const times = skewed.stdoutLines.map((line) => Date.parse(String(parseLogLine(line)?.time)));
      const first = times.find((t) => Number.isFinite(t));
      const observed = first === undefined ? undefined : Math.round((first - Date.now()) / 60_000);
      if (observed === undefined || observed < 110) {
        throw new Error(`the skewed sender does not run 2 h ahead (observed ${observed ?? 'no'} minutes)`);
      }
      run.note(`${skew.how}; the skewed sender logged times ${observed} minutes ahead`);
    },
    inject: () => Promise.resolve(0),
  },
];

function parseLogLine(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** The environment that shifts one process's clock: libfaketime when installed, else a Node preload shim. */
function skewedClock(faketime: string, offsetMs: number): { env: Record<string, string>; how: string } {
  const library = ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib']
    .map((dir) => join(dir, 'faketime', 'libfaketime.so.1'))
    .find((path) => existsSync(path));
  if (library) {
    return {
      env: { LD_PRELOAD: library, FAKETIME: faketime, FAKETIME_DONT_FAKE_MONOTONIC: '1' },
      how: `libfaketime (${library}, FAKETIME=${faketime})`,
    };
  }
  return {
    env: {
      NODE_OPTIONS: `--require ${join(root, 'scripts', 'lib', 'skew-clock.cjs')}`,
      CLOCK_SKEW_MS: String(offsetMs),
    },
    how: `a Node preload shim (scripts/lib/skew-clock.cjs, ${offsetMs} ms): libfaketime is not installed`,
  };
}

function requestsFor(count: number): OutreachRequested[] {
  return Array.from({ length: count }, (_, i) =>
    outreachRequest(
      { requestId: `chaos-${i}`, campaignId: CAMPAIGN, candidateId: `cand-${i}`, email: `cand-${i}@example.com` },
      'chaos',
    ),
  );
}

interface Result {
  readonly scenario: string;
  readonly fault: string;
  readonly requests: number;
  readonly published: number;
  readonly delivered: number;
  readonly outcomes: Record<string, number>;
  readonly duplicates: number;
  readonly lost: number;
  readonly ambiguous: number;
  readonly ambiguousBound: number;
  readonly mismatched: number;
  readonly seconds: number;
  readonly notes: readonly string[];
  readonly violations: readonly string[];
}

async function runScenario(
  scenario: Scenario,
  shared: { kafkaBrokers: string; databaseUrl: string },
  portBase: number,
): Promise<Result> {
  const started = Date.now();
  const run = `chaos${Date.now().toString(36)}`;
  const ownDir = join(root, '.infra', 'chaos', run);
  let kafkaInstance: KafkaInstance | undefined;
  let postgresInstance: PostgresInstance | undefined;
  let kafkaBrokers = shared.kafkaBrokers;
  let databaseUrl = shared.databaseUrl;
  let kafkaPid: number | undefined;
  if (scenario.ownKafka) {
    kafkaInstance = { dir: join(ownDir, 'kafka'), port: await freePort(), controllerPort: await freePort() };
    ({ brokers: kafkaBrokers, pid: kafkaPid } = await startKafka(kafkaInstance));
  }
  if (scenario.ownPostgres) {
    postgresInstance = { dir: join(ownDir, 'postgres'), port: await freePort() };
    databaseUrl = await startOwnedPostgres(postgresInstance);
  }
  const kafka = createKafka({ brokers: kafkaBrokers.split(','), clientId: `chaos-${scenario.name}` });
  const sink = await new SmtpSink({
    behaviour: () => (scenario.sinkDelayMs ? { delayMs: scenario.sinkDelayMs } : undefined),
    ...(scenario.hostile && { hostile: scenario.hostile }),
  }).start();
  const stack = new Stack({
    run,
    kafkaBrokers,
    databaseUrl,
    portBase,
    token: 'chaos-token',
    smtpPort: sink.port,
    env: (service) =>
      service === 'sender'
        ? {
            SEND_CONCURRENCY: String(CONCURRENCY),
            SEND_BATCH_SIZE: '50',
            LEASE_MS: '4000',
            PROVIDER_TIMEOUT_MS: '1500',
            RECONCILE_INTERVAL_MS: '300',
            RETRY_BACKOFF_MS: '200',
          }
        : { EXPERIMENT_URL: 'http://127.0.0.1:9/unused' },
  });
  // Interrupted (Ctrl-C, a crash): no broker or database of the suite's own outlives it (the stack
  // kills its own processes).
  const exitHandler = () => {
    const postmaster = postgresInstance && join(postgresInstance.dir, 'data', 'postmaster.pid');
    const postgresPid =
      postmaster && existsSync(postmaster) ? Number(readFileSync(postmaster, 'utf8').split('\n')[0]) : undefined;
    for (const pid of [kafkaPid, postgresPid]) {
      try {
        if (pid) process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  process.on('exit', exitHandler);
  await stack.createTopics(scenario.partitions ?? 6);

  const requests = requestsFor(config.requests);
  const notes: string[] = [];
  let published = 0;
  let producer = new EventProducer(kafka);
  const requestsTopic = topicName('outreachRequested', stack.prefix);
  const ctx: Run = {
    stack,
    sink,
    kafka,
    requests,
    note: (text) => notes.push(text),
    progress: (share) =>
      waitFor(() => sink.messages.length >= Math.floor(requests.length * share), {
        timeoutMs: config.timeoutMs,
        description: `${Math.round(share * 100)}% of the requests delivered`,
      }).then(() => undefined),
    async publish(events, options) {
      if (options?.via === 'http') {
        for (let i = 0; i < events.length; i += 25) {
          await Promise.all(
            events
              .slice(i, i + 25)
              .map((r) => stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: ingressBody(r) })),
          );
        }
        published += events.length;
        return;
      }
      if (options?.fresh) {
        await producer.disconnect();
        producer = new EventProducer(kafka);
      }
      for (let i = 0; i < events.length; i += 500) {
        await producer.publish(events.slice(i, i + 500).map((event) => ({ topic: requestsTopic, event })));
      }
      published += events.length;
    },
    senderNoticesOutage: (timeoutMs) =>
      waitFor(async () => !(await fetch(stack.url('sender', '/health/ready')).then((r) => r.ok)), {
        timeoutMs,
        intervalMs: 100,
        description: 'the sender to report the outage',
      }).then(
        () => true,
        () => false,
      ),
    ...(kafkaInstance && {
      restartKafka: async () => {
        await stopKafka(kafkaInstance);
        const noticed = await ctx.senderNoticesOutage(15_000);
        kafkaPid = (await startKafka(kafkaInstance)).pid;
        return noticed;
      },
    }),
    ...(postgresInstance && {
      restartPostgres: async () => {
        await stopOwnedPostgres(postgresInstance);
        const noticed = await ctx.senderNoticesOutage(15_000);
        await startOwnedPostgres(postgresInstance);
        return noticed;
      },
    }),
  };
  const ticker = setInterval(
    () => say(`  ${scenario.name}: ${sink.messages.length}/${requests.length} delivered`),
    5_000,
  );
  const db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  db.on('error', () => undefined); // the postgres-restart scenario drops these connections on purpose
  const sendsTable = `"${stack.schema('sender')}".sends`;
  try {
    await (scenario.load ?? startDefault)(ctx);
    const inFlightAtFaults = await scenario.inject(ctx);

    // Done when every request has a terminal row, nothing is mid-send, and that held for 3 polls.
    const expected = new Map(
      requests.map((r) => [sendIdFor(r.campaignId, normalizeCandidateKey(r.candidateId), r.step), r] as const),
    );
    const rows = async () =>
      (
        await db.query<{ sendId: string; status: string; campaignId: string; emailNorm: string; step: string }>(
          `SELECT send_id AS "sendId", status, campaign_id AS "campaignId", email_norm AS "emailNorm", step FROM ${sendsTable}`,
        )
      ).rows;
    const terminal = new Set(['sent', 'failed', 'suppressed', 'ambiguous']);
    let stableFor = 0;
    let previous = '';
    await waitFor(
      async () => {
        const all = await rows().catch(() => undefined);
        if (!all) return false;
        const done = all.filter((r) => terminal.has(r.status)).length;
        const snapshot = `${done}/${all.length}/${sink.messages.length}`;
        stableFor = snapshot === previous ? stableFor + 1 : 0;
        previous = snapshot;
        return done === all.length && done >= expected.size && stableFor >= 3;
      },
      { timeoutMs: config.timeoutMs, intervalMs: 500, description: `every request of ${scenario.name} terminal` },
    );

    // Checks: the sink against the sent log, never against the suite's own expectations.
    const log = await rows();
    const bySendId = new Map(log.map((r) => [r.sendId, r]));
    const perMessageId = new Map<string, number>();
    const perSlot = new Map<string, number>();
    for (const m of sink.messages) {
      perMessageId.set(m.messageId ?? '', (perMessageId.get(m.messageId ?? '') ?? 0) + 1);
      const slot = `${m.headers.get('x-outreach-campaign')}|${m.to.join(',').toLowerCase()}`;
      perSlot.set(slot, (perSlot.get(slot) ?? 0) + 1);
    }
    const duplicates =
      [...perMessageId.values()].reduce((n, c) => n + Math.max(0, c - 1), 0) +
      [...perSlot.values()].reduce((n, c) => n + Math.max(0, c - 1), 0);
    const lost = [...expected.keys()].filter((id) => !terminal.has(bySendId.get(id)?.status ?? '')).length;
    const unexpectedRows = log.filter((r) => !expected.has(r.sendId)).length;
    const sendIdOf = (messageId: string | undefined) => /^<([^@]+)@/.exec(messageId ?? '')?.[1] ?? '';
    const delivered = new Set(sink.messages.map((m) => sendIdOf(m.messageId)));
    const sentUndelivered = log.filter((r) => r.status === 'sent' && !delivered.has(r.sendId)).length;
    const deliveredUnsent = [...delivered].filter(
      (id) => !['sent', 'ambiguous'].includes(bySendId.get(id)?.status ?? ''),
    ).length;
    const outcomes: Record<string, number> = {};
    for (const r of log) outcomes[r.status] = (outcomes[r.status] ?? 0) + 1;
    const ambiguous = outcomes.ambiguous ?? 0;
    // Each connection the SMTP server cut after it had the message may leave one send in doubt.
    const cut = sink.misbehaved.length;
    const ambiguousBound = inFlightAtFaults + cut;
    if (cut > 0) notes.push(`the SMTP server cut ${cut} connections after the final dot`);
    const violations = [
      duplicates > 0 && `${duplicates} duplicate deliveries`,
      lost > 0 && `${lost} requests without a terminal outcome`,
      unexpectedRows > 0 && `${unexpectedRows} sends that match no request`,
      ambiguous > ambiguousBound &&
        `${ambiguous} ambiguous sends, more than the ${ambiguousBound} in flight at the faults or cut by the server`,
      sentUndelivered > 0 && `${sentUndelivered} sends recorded as sent that the SMTP sink never received`,
      deliveredUnsent > 0 && `${deliveredUnsent} deliveries recorded as failed, suppressed or not at all`,
    ].filter((v): v is string => typeof v === 'string');
    return {
      scenario: scenario.name,
      fault: scenario.fault,
      requests: requests.length,
      published,
      delivered: sink.messages.length,
      outcomes,
      duplicates,
      lost,
      ambiguous,
      ambiguousBound,
      mismatched: sentUndelivered + deliveredUnsent,
      seconds: Math.round((Date.now() - started) / 100) / 10,
      notes,
      violations,
    };
  } catch (error) {
    process.stderr.write(`${stack.tails(15)}\n`);
    throw error;
  } finally {
    clearInterval(ticker);
    await producer.disconnect().catch(() => undefined);
    await stack.stopAll();
    process.off('exit', exitHandler);
    await sink.stop();
    // Scenarios leave nothing behind on the shared broker and database.
    await stack
      .dropData(['planner', 'sender'])
      .catch((error: unknown) => say(`clean-up of ${run} failed: ${String(error)}`));
    await db.end().catch(() => undefined);
    if (kafkaInstance) await stopKafka(kafkaInstance).catch(() => undefined);
    // Purge, not only stop: as root its data lives outside ownDir, in the temp directory (issue #22).
    if (postgresInstance) await purgeOwnedPostgres(postgresInstance).catch(() => undefined);
    rmSync(ownDir, { recursive: true, force: true });
  }
}

function report(results: readonly Result[], machine: MachineDescription): string {
  const lines = [
    `# Reliability suite: ${configName} configuration`,
    '',
    machineMarkdown(machine),
    `- ${results.reduce((n, r) => n + r.requests, 0)} requests in all, ${CONCURRENCY} concurrent sends per sender`,
    '',
    '| scenario | requests | published | delivered | outcomes | duplicates | lost | ambiguous (bound) | mismatched | seconds | result |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.scenario} | ${r.requests} | ${r.published} | ${r.delivered} | ${Object.entries(r.outcomes)
          .map(([k, v]) => `${k} ${v}`)
          .join(
            ', ',
          )} | ${r.duplicates} | ${r.lost} | ${r.ambiguous} (≤ ${r.ambiguousBound}) | ${r.mismatched} | ${r.seconds} | ${
          r.violations.length === 0 ? 'pass' : `FAIL: ${r.violations.join('; ')}`
        } |`,
    ),
    '',
    '## Faults',
    '',
    ...results.map((r) => `- **${r.scenario}**: ${r.fault}.${r.notes.length > 0 ? ` ${r.notes.join('; ')}.` : ''}`),
    '',
  ];
  return lines.join('\n');
}

async function main(): Promise<number> {
  const only = args.only?.split(',').map((s) => s.trim());
  const chosen = scenarios.filter((s) => !only || only.includes(s.name));
  if (only && chosen.length !== only.length) {
    throw new Error(`unknown scenario in --only; the scenarios are ${scenarios.map((s) => s.name).join(', ')}`);
  }
  const state = await up();
  const command = `npm run chaos${configName === 'full' && !only ? '' : ` -- --config ${configName}${only ? ` --only ${only.join(',')}` : ''}`}`;
  const machine = await describeMachine(state.databaseUrl, command);
  say(`${configName} configuration: ${chosen.length} scenarios × ${config.requests} requests`);
  const results: Result[] = [];
  for (const scenario of chosen) {
    say(`${scenario.name}: ${scenario.fault}`);
    const result = await runScenario(scenario, state, Number(args['port-base']));
    results.push(result);
    say(
      `${scenario.name}: ${result.violations.length === 0 ? 'pass' : `FAIL (${result.violations.join('; ')})`} in ${result.seconds} s`,
    );
  }
  const markdown = report(results, machine);
  const dir = join(root, 'reports', 'chaos');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${configName}.md`), markdown);
  writeFileSync(
    join(dir, `${configName}.json`),
    `${JSON.stringify({ config: configName, machine, results }, null, 2)}\n`,
  );
  process.stdout.write(`\n${markdown}\n`);
  const failed = results.filter((r) => r.violations.length > 0);
  say(
    failed.length === 0
      ? `every scenario passed; reports in reports/chaos/${configName}.{md,json}`
      : `${failed.length} scenario(s) violated a guarantee: ${failed.map((r) => r.scenario).join(', ')}`,
  );
  return failed.length === 0 ? 0 : 1;
}

// Leftovers of an interrupted run (its own brokers' and databases' directories) go first.
const chaosDir = join(root, '.infra', 'chaos');
if (existsSync(chaosDir) && readdirSync(chaosDir).length > 0) rmSync(chaosDir, { recursive: true, force: true });

process.once('SIGINT', () => process.exit(130));
main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`[chaos] ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
