/**
 * `npm run demo`: the main job on a fresh machine. Brings up (or reuses) Kafka and PostgreSQL,
 * starts the four services as processes plus a real SMTP sink, and drives a realistic workload
 * through the public ingress only (the Kafka topic and the planner's HTTP endpoint):
 *   two campaigns, an A/B experiment, a follow-up step, replies, a suppressed address, duplicate
 *   requests with case-variant addresses, planted stalls, and a sender SIGKILL midway.
 * The sink also answers Mailpit's search API, and the sender runs its delivery lookup against it
 * (PROVIDER_LOOKUP=mailpit, ADR 009): the sends the SIGKILL leaves in doubt, and one whose connection
 * the sink drops after the final dot, are settled without an operator.
 * It shows live progress, then a report whose numbers come from the SMTP sink and the services'
 * APIs and /metrics, never from the demo's own expectations. Then it keeps the stack running until Ctrl-C.
 *
 *   DEMO_CANDIDATES (default 2000)  DEMO_EXIT=1 (stop after the report; exit 1 on a violation)
 *   DEMO_PORT_BASE (default 8080: services on +1..+4, the console on +9)
 *   DEMO_SETTLE_TIMEOUT_MS (default 30000: how long the report waits on sends still in doubt once
 *   nothing else moves; what is left then is an operator's, and a violation)
 * The operations console (services/console, ADR 015) runs beside them on DEMO_PORT_BASE + 9, with an
 * operator `demo` whose password is drawn for the run; its URL and the password are printed.
 * With Debian's `prometheus` on PATH, a Prometheus scrapes the four services every 2 s and evaluates
 * deploy/prometheus/rules.yml (scripts/lib/prometheus.ts); its URL is printed, and it stops with the demo.
 * Each run uses its own topic prefix and database schemas, so runs never see each other's data.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createKafka, EventProducer, topicName } from '@outreach/shared';
import { type MessageReceived, type NextStepScheduled, type OutreachRequested } from '@outreach/contracts';
import { SmtpSink, waitFor } from '@outreach/testkit';
import { infraDir, up } from './infra.js';
import { Prometheus, prometheusAvailable } from './lib/prometheus.js';
import { consoleSignIn, startConsole, type RunningConsole } from './lib/console.js';
import { DEMO_EXPERIMENT, demoWorkload, SUPPRESSED_ADDRESS } from './lib/demo-workload.js';
import { ingressBody, services, Stack, type Service } from './lib/stack.js';

const candidates = Number(process.env.DEMO_CANDIDATES ?? 2_000);
const portBase = Number(process.env.DEMO_PORT_BASE ?? 8080);
const exitAfterReport = process.env.DEMO_EXIT === '1';
const settleTimeoutMs = Number(process.env.DEMO_SETTLE_TIMEOUT_MS ?? 30_000);
const run = `demo${Date.now().toString(36)}`;

function say(message: string): void {
  process.stdout.write(`[demo] ${message}\n`);
}

async function main(): Promise<number> {
  const started = Date.now();
  const state = await up();
  // Public topics in the Confluent wire format when the stack runs a registry (ADR 011): the Stack
  // registers the run's subjects and hands the services its URL.
  if (state.schemaRegistryUrl) process.env.SCHEMA_REGISTRY_URL ??= state.schemaRegistryUrl;
  const kafka = createKafka({ brokers: state.kafkaBrokers.split(','), clientId: 'demo' });
  // Once the sender is restarted after its SIGKILL, the sink drops one connection right after the
  // final dot (the message is stored, its 250 never sent): a send in doubt that exists whatever
  // moment the kill lands at, even one with no provider call in flight.
  let dropTransaction: number | undefined;
  const sink = await new SmtpSink({
    behaviour: (to) => (to.startsWith('bounce') ? { reject: 'mailbox unavailable' } : undefined),
    hostile: (n) => (n === dropTransaction ? { at: 'dot', act: 'drop' } : undefined),
  }).start();
  const mailpitApi = await sink.startMailpitApi();
  const stack = new Stack({
    run,
    kafkaBrokers: state.kafkaBrokers,
    databaseUrl: state.databaseUrl,
    portBase,
    token: 'demo-token',
    smtpPort: sink.port,
    // liveness: short graces so the planted stalls show up during the demo
    env: (service) =>
      service === 'liveness'
        ? { GRACE_INBOUND_MS: '4000', GRACE_OUTBOUND_MS: '600000', GRACE_OVERDUE_MS: '60000', SWEEP_INTERVAL_MS: '500' }
        : service === 'sender'
          ? lookupSettings(mailpitApi)
          : {},
  });
  const { prefix } = stack;
  await stack.createTopics(6);
  say(
    `kafka ${state.kafkaBrokers} (${state.kafka.source}), postgres ${state.postgres.source}, SMTP sink on ${sink.port} (Mailpit API ${mailpitApi}), run ${run}`,
  );
  const url = (service: Service, path: string) => stack.url(service, path);
  let prometheus: Prometheus | undefined;
  let operationsConsole: RunningConsole | undefined;
  const stopAll = async () => {
    await prometheus?.stop();
    await operationsConsole?.stop();
    await stack.stopAll();
    await sink.stop();
  };

  try {
    for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) {
      await stack.start(service);
      say(`${service.padEnd(10)} ready  ${url(service, '/health/ready')}`);
    }
    operationsConsole = await startConsole({
      stack,
      databaseUrl: state.databaseUrl,
      kafkaBrokers: state.kafkaBrokers,
      port: portBase + 9,
      token: 'demo-token',
      dir: join(infraDir, 'console', run),
    });
    // Signed in once here, as a browser would: the printed login is known to work.
    await consoleSignIn(operationsConsole.url, operationsConsole.user, operationsConsole.password);
    say(
      `console    ready  ${operationsConsole.url}/ (sign in as ${operationsConsole.user}, password ${operationsConsole.password})`,
    );
    if (prometheusAvailable()) {
      prometheus = await Prometheus.start({
        dir: join(infraDir, 'prometheus', run),
        targets: services.map((service) => ({ service, address: `127.0.0.1:${stack.port(service)}` })),
      });
      say(`prometheus ready  ${prometheus.url} (alerts: ${prometheus.url}/alerts; rules: deploy/prometheus/rules.yml)`);
    } else {
      say('prometheus not found: `apt-get install prometheus` and the demo starts one that scrapes the services');
    }

    // Set-up through the services' own APIs.
    await stack.json('experiment', '/v1/experiments', { method: 'POST', body: DEMO_EXPERIMENT });
    await stack.json('sender', `/v1/suppressions/${SUPPRESSED_ADDRESS}`, {
      method: 'PUT',
      body: { reason: 'unsubscribe' },
    });

    // The workload: two campaigns; the first is an A/B test with a follow-up. Duplicates: every 10th
    // request again, and every 20th with its address in other case and spaces.
    const workload = demoWorkload(candidates, { producer: 'demo-ats', followUpDelayMs: 2_000 });
    const { requests, backend, repeats: duplicates, caseVariants: variants } = workload;
    const viaKafka = requests.filter((_, i) => i % 4 !== 0);
    const viaHttp = requests.filter((_, i) => i % 4 === 0);
    const producer = new EventProducer(kafka);
    const requestsTopic = topicName('outreachRequested', prefix);
    say(
      `publishing ${requests.length} requests (+${duplicates.length} duplicates, +${variants.length} case variants): ${viaKafka.length} via Kafka, ${viaHttp.length} via HTTP`,
    );
    for (let i = 0; i < viaKafka.length; i += 500) {
      await producer.publish(viaKafka.slice(i, i + 500).map((event) => ({ topic: requestsTopic, event })));
    }
    for (let i = 0; i < viaHttp.length; i += 20) {
      await Promise.all(
        viaHttp
          .slice(i, i + 20)
          .map((r) => stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: ingressBody(r) })),
      );
    }
    await producer.publish([...duplicates, ...variants].map((event) => ({ topic: requestsTopic, event })));

    // Replies: every 25th backend candidate answers, and its agent schedules the next step (healthy).
    // Planted stalls: 12 product-design candidates answer, and nobody ever does anything.
    const conversationTopic = topicName('conversationEvents', prefix);
    const envelope = (campaignId: string, candidateKey: string) => ({
      eventId: randomUUID(),
      occurredAt: Date.now(),
      producer: 'demo-agent',
      correlationId: randomUUID(),
      causationId: null,
      conversationId: `${campaignId}:${candidateKey}`,
      campaignId,
      candidateKey,
    });
    const reply = (r: OutreachRequested) => ({
      topic: conversationTopic,
      event: { type: 'MessageReceived', ...envelope(r.campaignId, r.candidateId), messageId: null } as MessageReceived,
    });
    const repliers = requests.slice(0, backend).filter((_, i) => i % 25 === 3);
    const planted = requests
      .slice(backend)
      .filter((_, i) => i % 60 === 1)
      .slice(0, 12);

    // Midway: SIGKILL the sender, then restart it.
    const totalHeads = requests.length;
    let killed = false;
    let beforeKill: Settlements = NO_SETTLEMENTS;
    const progress = setInterval(() => {
      say(
        `delivered ${sink.messages.length} emails so far (${Math.round(((Date.now() - started) / 1000) * 10) / 10} s)`,
      );
    }, 2_000);
    try {
      await waitFor(() => sink.messages.length >= totalHeads * 0.4, {
        timeoutMs: Number(process.env.DEMO_STEP_TIMEOUT_MS ?? 300_000),
        description: '40% of the first emails delivered',
      });
      // The counters live in the process: what the first one settled is read just before it dies.
      beforeKill = await settlements();
      await stack.stop('sender', 'SIGKILL');
      killed = true;
      say(`SIGKILLed the sender after ${sink.messages.length} deliveries; restarting it`);
      await stack.start('sender');
      dropTransaction = sink.transactions + 1;
      say(
        'sender restarted: it asks the Mailpit API about the sends the kill left in doubt, and the sink drops its next connection after the final dot',
      );
      // Replies arrive while follow-ups are pending: the planner cancels those; the agent answers.
      await producer.publish([
        ...repliers.map(reply),
        ...repliers.map((r) => ({
          topic: conversationTopic,
          event: {
            type: 'NextStepScheduled',
            ...envelope(r.campaignId, r.candidateId),
            stepId: 'call',
            dueAt: Date.now() + 86_400_000,
          } as NextStepScheduled,
        })),
      ]);

      // Done when nothing is scheduled, nothing is mid-send or in doubt, every first email has an
      // outcome, and those numbers have not moved for five polls (follow-ups are scheduled as sends
      // land). A send the lookup cannot settle stays `ambiguous` for good: once nothing else has
      // moved for DEMO_SETTLE_TIMEOUT_MS the report goes ahead and counts it as left for an operator.
      let previous = '';
      let stableFor = 0;
      let movedAt = Date.now();
      await waitFor(
        async () => {
          const steps = (
            await stack.json<{ steps: Array<{ status: string; steps: number }> }>('planner', '/v1/steps/summary')
          ).steps;
          const outcomes = await campaignOutcomes();
          const inFlight = (outcomes.claimed ?? 0) + (outcomes.sending ?? 0);
          const terminal = Object.entries(outcomes)
            .filter(([k]) => !['claimed', 'sending', 'skipped_duplicate'].includes(k))
            .reduce((n, [, v]) => n + v, 0);
          const snapshot = JSON.stringify({ steps, outcomes, delivered: sink.messages.length });
          stableFor = snapshot === previous ? stableFor + 1 : 0;
          if (snapshot !== previous) movedAt = Date.now();
          previous = snapshot;
          const quiet =
            !steps.some((x) => x.status === 'scheduled') && inFlight === 0 && terminal >= totalHeads && stableFor >= 5;
          return quiet && ((outcomes.ambiguous ?? 0) === 0 || Date.now() - movedAt >= settleTimeoutMs);
        },
        { timeoutMs: 600_000, intervalMs: 1_000, description: 'every planned send to reach an outcome' },
      );
      // Planted stalls: product-design candidates reply, and nobody ever answers.
      await producer.publish(planted.map(reply));
      await waitFor(async () => (await stalled()).length >= planted.length, {
        timeoutMs: 60_000,
        description: 'the planted stalls to be flagged',
      });
    } finally {
      clearInterval(progress);
      await producer.disconnect();
    }

    // The report: every number from the sink or a service API.
    const elapsed = (Date.now() - started) / 1000;
    const outcomes = await campaignOutcomes();
    const perSend = new Map<string, number>();
    const perAddressStep = new Map<string, number>();
    for (const m of sink.messages) {
      perSend.set(m.messageId ?? '', (perSend.get(m.messageId ?? '') ?? 0) + 1);
      const key = `${m.headers.get('x-outreach-campaign')}|${m.to.join(',').toLowerCase()}|${m.subject === 'Following up' ? 'follow-up' : 'intro'}`;
      perAddressStep.set(key, (perAddressStep.get(key) ?? 0) + 1);
    }
    const duplicateEmails = [...perSend.values(), ...perAddressStep.values()].filter((n) => n > 1).length;
    const experiment = await stack.json<{
      variants: Array<{ variant: string; assigned: number; exposedCandidates: number }>;
      sampleRatioMismatch: { pValue: number; mismatch: boolean };
      contaminated: unknown[];
    }>('experiment', '/v1/experiments/subject-line/report');
    const flagged = await stalled();
    const plantedIds = new Set(planted.map((r) => `${r.campaignId}:${r.candidateId}`));
    const unexpectedFlags = flagged.filter((c) => !plantedIds.has(c.conversationId));
    const missedStalls = [...plantedIds].filter((id) => !flagged.some((c) => c.conversationId === id));
    // Sends in doubt: settled by the first sender (read before its kill) and by the one running now.
    const afterRestart = await settlements();
    const settled = {
      evidence: beforeKill.evidence + afterRestart.evidence,
      found: beforeKill.found + afterRestart.found,
      notFound: beforeKill.notFound + afterRestart.notFound,
    };
    const leftForOperator = outcomes.ambiguous ?? 0;
    const lines = [
      '',
      '| measure | value |',
      '|---|---|',
      `| requests published (incl. duplicates and case variants) | ${requests.length + duplicates.length + variants.length} |`,
      `| distinct candidates | ${requests.length} |`,
      `| emails delivered (SMTP sink) | ${sink.messages.length} |`,
      `| duplicate emails (same send, or same campaign+address+step) | ${duplicateEmails} |`,
      `| outcomes (sender) | ${Object.entries(outcomes)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')} |`,
      `| variant balance | ${experiment.variants.map((v) => `${v.variant} ${v.assigned} assigned / ${v.exposedCandidates} exposed`).join('; ')} |`,
      `| sample-ratio mismatch p-value | ${experiment.sampleRatioMismatch.pValue.toFixed(4)}${experiment.sampleRatioMismatch.mismatch ? ' (MISMATCH)' : ''} |`,
      `| contaminated candidates | ${experiment.contaminated.length} |`,
      `| stalled conversations flagged / planted | ${flagged.length} / ${planted.length} (${unexpectedFlags.length} unexpected, ${missedStalls.length} missed) |`,
      `| sender SIGKILLed midway | ${killed ? 'yes, restarted' : 'no'} |`,
      `| connections the SMTP sink dropped after the final dot | ${sink.misbehaved.length} |`,
      `| sends in doubt settled by delivery evidence | ${settled.evidence} |`,
      `| sends in doubt settled by the delivery lookup | ${settled.found + settled.notFound} (found: ${settled.found} recorded sent; not found: ${settled.notFound} sent again) |`,
      `| sends in doubt left for an operator | ${leftForOperator} |`,
      `| throughput | ${(sink.messages.length / elapsed).toFixed(1)} emails/s over ${elapsed.toFixed(1)} s |`,
      '',
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    const violations = [
      duplicateEmails > 0 && 'duplicate emails',
      experiment.contaminated.length > 0 && 'contaminated candidates',
      (unexpectedFlags.length > 0 || missedStalls.length > 0) && 'stall flags do not match the planted stalls',
      (outcomes.claimed ?? 0) + (outcomes.sending ?? 0) > 0 && 'sends without an outcome',
      leftForOperator > 0 && 'sends in doubt left for an operator',
    ].filter(Boolean);
    if (violations.length > 0) say(`VIOLATIONS: ${violations.join(', ')}`);
    else
      say(
        'all guarantees held: 0 duplicates, 0 contaminated, every planted stall flagged and no other, every request accounted for, every send in doubt settled without an operator',
      );

    if (exitAfterReport) {
      await stopAll();
      return violations.length > 0 ? 1 : 0;
    }
    say(
      `the stack keeps running: the console ${operationsConsole.url}/ (${operationsConsole.user} / ${operationsConsole.password}), sender ${url('sender', '/v1/campaigns/backend-engineers')}, experiment ${url('experiment', '/v1/experiments/subject-line/report')}, liveness ${url('liveness', '/v1/conversations/stalled')} (with \`Authorization: Bearer demo-token\`), metrics at /metrics${prometheus ? `, Prometheus at ${prometheus.url}` : ''}. Ctrl-C stops the services; \`npm run infra:down\` stops Kafka.`,
    );
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    say('stopping services ...');
    await stopAll();
    return violations.length > 0 ? 1 : 0;
  } catch (error) {
    process.stderr.write(`${stack.tails()}\n`);
    await stopAll();
    throw error;
  }

  async function campaignOutcomes(): Promise<Record<string, number>> {
    const totals: Record<string, number> = {};
    for (const campaign of ['backend-engineers', 'product-designers']) {
      const { counts } = await stack.json<{ counts: Record<string, number> }>('sender', `/v1/campaigns/${campaign}`);
      for (const [k, v] of Object.entries(counts)) totals[k] = (totals[k] ?? 0) + v;
    }
    return totals;
  }

  /**
   * What the sender's /metrics say it settled: by delivery evidence, and by its delivery lookup
   * (found: recorded sent; not found: sent again). A `pending` answer settles nothing (it is asked
   * again), so only the decisive ones count.
   */
  async function settlements(): Promise<Settlements> {
    const text = await (await fetch(url('sender', '/metrics'))).text();
    return {
      evidence: sumOf(text, 'outreach_sender_settled_by_evidence_total'),
      found: sumOf(text, 'outreach_sender_lookup_decisions_total', 'decision="sent"'),
      notFound: sumOf(text, 'outreach_sender_lookup_decisions_total', 'decision="not_sent"'),
    };
  }

  async function stalled(): Promise<Array<{ conversationId: string }>> {
    return (
      await stack.json<{ conversations: Array<{ conversationId: string }> }>(
        'liveness',
        '/v1/conversations/stalled?limit=500',
      )
    ).conversations;
  }
}

interface Settlements {
  readonly evidence: number;
  readonly found: number;
  readonly notFound: number;
}
const NO_SETTLEMENTS: Settlements = { evidence: 0, found: 0, notFound: 0 };

/** The sum of a counter's series on a /metrics page, over those carrying `label` when given. */
function sumOf(metrics: string, name: string, label?: string): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    const match = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (match?.[1] !== name) continue;
    if (label !== undefined && !(match[2] ?? '').split(',').includes(label)) continue;
    sum += Number(match[3]);
  }
  return sum;
}

/**
 * The sender's delivery lookup against the sink's Mailpit API (ADR 009), with timings that settle a
 * send in doubt within seconds: the final-reply wait (the hand-over bound) 4 s, just past the call's
 * 3 s timeout as in production; the sink's search shows a message the moment it is stored, so a
 * short settle time; a lapsed lease after 8 s (at least twice the timeout). A send the sink does not
 * hold is sent again once the lease lapses; LOOKUP_GIVE_UP_MS must be at least hand-over plus settle
 * (services/sender/src/config.ts) and is far past it, so only a lookup failing for a minute gives up.
 */
function lookupSettings(mailpitApiUrl: string): Record<string, string> {
  return {
    PROVIDER_LOOKUP: 'mailpit',
    MAILPIT_API_URL: mailpitApiUrl,
    PROVIDER_TIMEOUT_MS: '3000',
    SMTP_FINAL_REPLY_TIMEOUT_MS: '4000',
    LEASE_MS: '8000',
    LOOKUP_SETTLE_MS: '500',
    LOOKUP_RECHECK_MS: '1000',
    LOOKUP_GIVE_UP_MS: '60000',
    RECONCILE_INTERVAL_MS: '500',
  };
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`[demo] ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
