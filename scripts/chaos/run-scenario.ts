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
import { EvidenceProvider } from './evidence.js';
import { Forger } from './forged-evidence.js';
import { OwnInfra, type Infra } from './own-infra.js';
import type { Result } from './report.js';
import type { Scenario } from './scenario.js';
import { startDefault } from './scenarios.js';
import { SecuredKafka } from './secured-kafka.js';
import { SenderMetrics, type Tallies } from './sender-metrics.js';
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
  // The provider's reports go to this run's sender, whose stack is made once the sink has its port.
  let senderUrl = (path: string): string => path;
  const provider =
    scenario.evidence &&
    new EvidenceProvider({ source: scenario.evidence, url: (path) => senderUrl(path), dsnToken: CHAOS_TOKEN });
  const forger =
    scenario.evidence &&
    new Forger({ source: scenario.evidence, url: (path) => senderUrl(path), dsnToken: CHAOS_TOKEN });
  const sink = await new SmtpSink({
    behaviour: () => (scenario.sinkDelayMs ? { delayMs: scenario.sinkDelayMs } : undefined),
    ...(scenario.hostile && { hostile: scenario.hostile }),
    ...(provider && { dsn: scenario.evidence === 'dsn', onMessage: (m) => provider.delivered(m) }),
  }).start();
  const lookupEnv = scenario.lookup
    ? lookupSettings(await sink.startMailpitApi())
    : provider
      ? { ...EVIDENCE_LOOKUP_SETTINGS, ...provider.senderEnv() }
      : {};
  const stack = chaosStack(run, { kafkaBrokers, databaseUrl: own.databaseUrl }, sink.port, options.portBase, {
    sender: lookupEnv,
    kafka: (service) => secured?.env(service) ?? {},
  });
  senderUrl = (path) => stack.url('sender', path);
  const partitions = scenario.partitions ?? 6;
  // Right after the previous scenario deleted its topics the broker may answer the new ones'
  // metadata with UNKNOWN_TOPIC_OR_PARTITION for a moment; creating topics is idempotent: try again.
  await waitFor(() => (secured ? secured.createTopics(partitions) : stack.createTopics(partitions)).then(() => true), {
    timeoutMs: 60_000,
    intervalMs: 1_000,
    description: `the topics of ${scenario.name}`,
  });

  const requests = requestsFor(config.requests);
  const metrics = scenario.lookup || provider ? new SenderMetrics(stack) : undefined;
  const driver = new Driver(stack, sink, kafka, requests, own, config.timeoutMs, metrics);
  const ticker = setInterval(
    () => say(`  ${scenario.name}: ${sink.messages.length}/${requests.length} delivered`),
    5_000,
  );
  const sentLog = new SentLog(own.databaseUrl, stack.schema('sender'));
  const emailOf = new Map(
    requests.map((r) => [sendIdFor(r.campaignId, normalizeCandidateKey(r.candidateId), r.step), r.email]),
  );
  // The attacker forges evidence for the sends in doubt, once a second, until the verdict.
  let forging: Promise<void> | undefined;
  let forgingOn = forger !== undefined;
  const forgeLoop = async (): Promise<void> => {
    while (forgingOn && forger) {
      const inDoubt = await sentLog.inDoubt().catch(() => []);
      await forger.forge(
        inDoubt.map((sendId) => ({ sendId, email: emailOf.get(sendId) ?? '' })),
        sink.messages[0],
      );
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  };
  try {
    await (scenario.load ?? startDefault)(driver);
    metrics?.start();
    forging = forgeLoop();
    const inFlightAtFaults = await scenario.inject(driver);

    const expected = new Set(emailOf.keys());
    await sentLog.settled(
      expected.size,
      sink,
      config.timeoutMs,
      `every request of ${scenario.name} terminal`,
      provider ? IN_DOUBT_FOR_MS : 0,
    );
    if (secured) driver.note(await secured.drained(config.timeoutMs));
    const cut = sink.misbehaved.length;
    forgingOn = false;
    await forging;
    // The reports still on their way are taken before the counters are read for the last time.
    const drained = provider ? await provider.drained(30_000) : true;
    metrics?.stop();
    await metrics?.sample();
    const log = await sentLog.rows();
    const verdict = judge({
      expected,
      log,
      deliveries: sink.messages,
      inFlightAtFaults,
      cut,
      evidenceSettles: provider !== undefined,
      evidenceRefused: provider?.summary().refused ?? [],
      forgeriesTrusted: forger?.summary().trusted ?? [],
    });
    if (cut > 0) driver.note(`the SMTP server cut ${cut} connections after the final dot`);
    if (provider) driver.note(evidenceNote(provider, drained));
    if (forger) driver.note(forgeryNote(forger, scenario.evidence === 'sendgrid'));
    const settledInLog = log.filter((r) => r.reason?.startsWith('settled by delivery evidence')).length;
    const tallies = metrics?.totals();
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
      ...(tallies && settled(tallies, settledInLog, provider !== undefined)),
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
    forgingOn = false;
    await forging?.catch(() => undefined);
    metrics?.stop();
    provider?.stop();
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

/**
 * The sender's lookup when the provider reports every message it takes (PROVIDER_LOOKUP=evidence):
 * no evidence within the window past the hand-over bound licenses the retry. The final-reply wait is
 * cut to 2.5 s as for the Mailpit lookup, and the window to 5 s: far longer than the sender's intake
 * is down at a SIGKILL and restart (its HTTP listens about 1 s after the kill here; readiness, which
 * waits for the consumer group, comes seconds later), while the reports wait and are retried. A send
 * cut before the server got it is sent again about 7.5 s after its attempt started, within the run.
 */
export const EVIDENCE_LOOKUP_SETTINGS: Readonly<Record<string, string>> = {
  PROVIDER_LOOKUP: 'evidence',
  DELIVERY_EVIDENCE_WINDOW_MS: '5000',
  SMTP_FINAL_REPLY_TIMEOUT_MS: '2500',
  LOOKUP_RECHECK_MS: '500',
};

/**
 * How long an `ambiguous` send is waited for where evidence settles sends in doubt: the hand-over
 * bound and the window above, and as much again.
 */
const IN_DOUBT_FOR_MS = 15_000;

const CHAOS_TOKEN = 'chaos-token';

/** The report's line on the provider's reports. */
function evidenceNote(provider: EvidenceProvider, drained: boolean): string {
  const s = provider.summary();
  return [
    `the provider reported ${s.reported} messages${s.unreported > 0 ? ` (${s.unreported} asked for no success DSN)` : ''}`,
    `in ${s.posts} posts, ${s.accepted} taken, ${s.retried} retried while the sender was down or busy, ${s.refused.length} refused`,
    ...(drained ? [] : [`${s.pending} reports still undelivered at the end`]),
  ].join(' ');
}

/** The report's line on the attacker's forgeries. */
function forgeryNote(forger: Forger, signed: boolean): string {
  const s = forger.summary();
  return `an attacker forged evidence for sends in doubt (${
    signed ? 'signed with its own key' : 'DSNs with made-up MACs or bare sendIds, through the hook with its token'
  }): ${s.answered} answered, ${s.refused} ${signed ? 'refused (403)' : 'taken as unverified'}, ${s.trusted.length} trusted, ${s.unanswered} unanswered while the sender was down`;
}

/** The report's figures on what settled the sends in doubt: the sender's counters, and the sent log's. */
function settled(
  tallies: Tallies,
  inLog: number,
  evidence: boolean,
): Pick<Result, 'settledByEvidence' | 'settledByEvidenceInLog' | 'deliveryEvidence' | 'lookupDecisions'> {
  return {
    ...(evidence && {
      settledByEvidence: tallies.outreach_sender_settled_by_evidence_total,
      settledByEvidenceInLog: inLog,
      deliveryEvidence: tallies.outreach_sender_delivery_evidence_total,
    }),
    lookupDecisions: tallies.outreach_sender_lookup_decisions_total,
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
    token: CHAOS_TOKEN,
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
