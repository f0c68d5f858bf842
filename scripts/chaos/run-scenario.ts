/**
 * One scenario from a clean state: its own topics, schemas and SMTP sink (and its own broker or
 * database when the fault stops one, or its principals and ACLs on the secured broker), the services
 * as processes, the load, the fault, then the wait until every request is settled and the verdict.
 * It leaves nothing behind.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createKafka, quoteIdent } from '@outreach/shared';
import { normalizeCandidateKey, sendIdFor, type OutreachRequested } from '@outreach/contracts';
import { SmtpSink, waitFor } from '@outreach/testkit';
import pg from 'pg';
import { root } from '../lib/paths.js';
import { outreachRequest, services, Stack, type Service } from '../lib/stack.js';
import { judge } from './checks.js';
import { CAMPAIGN, FAULT_SENDER_SETTINGS, say, type ChaosConfig } from './common.js';
import { Driver } from './driver.js';
import { OwnInfra, type Infra } from './own-infra.js';
import type { Result } from './report.js';
import type { Scenario } from './scenario.js';
import { startDefault } from './scenarios.js';
import { SecuredKafka } from './secured-kafka.js';
import { SentLog } from './sent-log.js';

export interface ScenarioOptions {
  readonly config: ChaosConfig;
  readonly portBase: number;
}

export async function runScenario(scenario: Scenario, shared: Infra, options: ScenarioOptions): Promise<Result> {
  const { config } = options;
  const started = Date.now();
  // Unique when scenarios start side by side (--parallel): the time alone can repeat.
  const run = `chaos${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const dir = join(root, '.infra', 'chaos', run);
  const own = await OwnInfra.start(scenario, shared, dir);
  const secured = scenario.secured ? await SecuredKafka.open(run, dir) : undefined;
  const kafkaBrokers = secured?.brokers ?? own.kafkaBrokers;
  const kafka = createKafka({
    brokers: kafkaBrokers.split(','),
    clientId: `chaos-${scenario.name}`,
    ...(secured && { security: secured.driverSecurity }),
  });
  const sink = await new SmtpSink({
    behaviour: () => (scenario.sinkDelayMs ? { delayMs: scenario.sinkDelayMs } : undefined),
    ...(scenario.hostile && { hostile: scenario.hostile }),
  }).start();
  const lookupEnv = scenario.lookup ? lookupSettings(await sink.startMailpitApi()) : {};
  const stack = chaosStack(run, { kafkaBrokers, databaseUrl: own.databaseUrl }, sink.port, options.portBase, {
    sender: lookupEnv,
    kafka: (service) => secured?.env(service) ?? {},
  });
  const partitions = scenario.partitions ?? 6;
  // Right after the previous scenario deleted its topics the broker may answer the new ones'
  // metadata with UNKNOWN_TOPIC_OR_PARTITION for a moment; creating topics is idempotent: try again.
  await waitFor(() => (secured ? secured.createTopics(partitions) : stack.createTopics(partitions)).then(() => true), {
    timeoutMs: 60_000,
    intervalMs: 1_000,
    description: `the topics of ${scenario.name}`,
  });

  const requests = requestsFor(config.requests);
  const driver = new Driver(stack, sink, kafka, requests, own, config.timeoutMs);
  const ticker = setInterval(
    () => say(`  ${scenario.name}: ${sink.messages.length}/${requests.length} delivered`),
    5_000,
  );
  const sentLog = new SentLog(own.databaseUrl, stack.schema('sender'));
  try {
    await (scenario.load ?? startDefault)(driver);
    const inFlightAtFaults = await scenario.inject(driver);

    const expected = new Set(
      requests.map((r) => sendIdFor(r.campaignId, normalizeCandidateKey(r.candidateId), r.step)),
    );
    await sentLog.settled(expected.size, sink, config.timeoutMs, `every request of ${scenario.name} terminal`);
    if (secured) driver.note(await secured.drained(config.timeoutMs));
    const cut = sink.misbehaved.length;
    const verdict = judge({ expected, log: await sentLog.rows(), deliveries: sink.messages, inFlightAtFaults, cut });
    if (cut > 0) driver.note(`the SMTP server cut ${cut} connections after the final dot`);
    return {
      scenario: scenario.name,
      fault: scenario.fault,
      requests: requests.length,
      published: driver.published,
      delivered: sink.messages.length,
      outcomes: verdict.outcomes,
      duplicates: verdict.duplicates,
      lost: verdict.lost,
      ambiguous: verdict.ambiguous,
      ambiguousBound: verdict.ambiguousBound,
      ...(scenario.kills
        ? { kills: scenario.kills, ambiguousPerKill: Math.round((verdict.ambiguous / scenario.kills) * 10) / 10 }
        : {}),
      mismatched: verdict.mismatched,
      seconds: Math.round((Date.now() - started) / 100) / 10,
      notes: driver.notes,
      violations: verdict.violations,
    };
  } catch (error) {
    process.stderr.write(`${stack.tails(15)}\n`);
    throw error;
  } finally {
    clearInterval(ticker);
    await driver.close();
    await stack.stopAll();
    await sink.stop();
    // Scenarios leave nothing behind on the shared brokers and database.
    await (secured ? secured.close().then(() => dropSchemas(stack, own.databaseUrl)) : stack.dropData(services)).catch(
      (error: unknown) => say(`clean-up of ${run} failed: ${String(error)}`),
    );
    await sentLog.end();
    await own.cleanUp();
  }
}

/**
 * The sender's delivery lookup against the sink's Mailpit API (ADR 009). The final-reply wait (the
 * hand-over bound) is cut to 2.5 s, still longer than the call's 1.5 s timeout as in production, so a
 * send the sink does not hold is sent again about 3 s after its attempt started, within the scenario.
 */
export function lookupSettings(mailpitApiUrl: string): Record<string, string> {
  return {
    PROVIDER_LOOKUP: 'mailpit',
    MAILPIT_API_URL: mailpitApiUrl,
    SMTP_FINAL_REPLY_TIMEOUT_MS: '2500',
    LOOKUP_SETTLE_MS: '500',
    LOOKUP_RECHECK_MS: '500',
  };
}

/** The run's services: short leases and timeouts, so that faults resolve within a scenario. */
function chaosStack(
  run: string,
  infra: Infra,
  smtpPort: number,
  portBase: number,
  extra: { readonly sender: Record<string, string>; readonly kafka: (service: Service) => Record<string, string> },
): Stack {
  return new Stack({
    run,
    kafkaBrokers: infra.kafkaBrokers,
    databaseUrl: infra.databaseUrl,
    portBase,
    token: 'chaos-token',
    smtpPort,
    env: (service) =>
      service === 'sender'
        ? {
            ...FAULT_SENDER_SETTINGS,
            ...extra.sender,
            ...extra.kafka(service),
          }
        : { EXPERIMENT_URL: 'http://127.0.0.1:9/unused', ...extra.kafka(service) },
  });
}

/** The run's schemas, for a run whose topics are not on the plaintext broker `Stack.dropData` reaches. */
async function dropSchemas(stack: Stack, databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (const service of services)
      await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(stack.schema(service))} CASCADE`);
  } finally {
    await client.end();
  }
}

function requestsFor(count: number): OutreachRequested[] {
  return Array.from({ length: count }, (_, i) =>
    outreachRequest(
      { requestId: `chaos-${i}`, campaignId: CAMPAIGN, candidateId: `cand-${i}`, email: `cand-${i}@example.com` },
      'chaos',
    ),
  );
}
