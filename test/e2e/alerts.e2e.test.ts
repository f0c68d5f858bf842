/**
 * The alert rules and the Grafana dashboard, proven against a real Prometheus (issue 17): the four
 * services run as processes (scripts/lib/stack.ts), Debian's `prometheus` scrapes them every 2 s
 * (scripts/lib/prometheus.ts) and evaluates deploy/prometheus/rules.yml, loaded through
 * `rulesWithShortFor`: the same file with every `for:` divided by FOR_FACTOR (10 min becomes 2 s),
 * nothing else changed. Then:
 *   - a garbage record on a consumed topic is dead-lettered and OutreachDeadLetters fires for its
 *     service, group and topic;
 *   - one campaign's life in compressed time (liveness graces of seconds): a finished sequence
 *     waits out its reply window well past the outbound grace and is closed (`sequence_completed`)
 *     without ever counting as stalled, and so is one whose follow-up was suppressed (the candidate
 *     unsubscribed); a follow-up scheduled for later is not a stall either; an
 *     unanswered reply and an overdue step fire OutreachStalledConversations, one per reason; a
 *     reply after the close reopens the conversation and counts; the agent's closes clear it all;
 *   - every panel query of deploy/grafana/outreach.json runs without error and names only metrics
 *     the running services expose.
 * Without the `prometheus` binary this file fails and says how to get it (.ci/run installs it).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createKafka, EventProducer, topicName } from '@outreach/shared';
import {
  type ConversationClosed,
  type MessageReceived,
  type NextStepScheduled,
  type OutreachRequested,
} from '@outreach/contracts';
import { SmtpSink, waitFor } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { infraDir } from '../../scripts/infra.js';
import {
  Prometheus,
  prometheusAvailable,
  rulesFile,
  rulesWithShortFor,
  type PrometheusAlert,
} from '../../scripts/lib/prometheus.js';
import { ingressBody, outreachRequest, services, Stack } from '../../scripts/lib/stack.js';
import { dashboardQueries, metricNames, readDashboard } from '../grafana.js';

const TOKEN = 'alerts-token';
/** Production `for:` durations are minutes: divided by 300, 10 min is 2 s, 15 min 3 s, 2 h 24 s. */
const FOR_FACTOR = 300;
const CAMPAIGN = 'alerts-life';
/** Liveness graces of seconds: the outbound grace well inside the reply window, as in production (72 h, 7 d). */
const GRACES = { inboundMs: 2_000, outboundMs: 5_000, overdueMs: 6_000, replyWindowMs: 10_000 };
const ALERT_TIMEOUT_MS = 40_000;

let stack: Stack;
let sink: SmtpSink;
let prometheus: Prometheus;
let producer: EventProducer;
/** A plain producer, for a record that is not an event. */
let raw: ReturnType<ReturnType<typeof createKafka>['producer']>;

beforeAll(async () => {
  if (!prometheusAvailable()) {
    throw new Error(
      "prometheus is not installed: install Debian's `prometheus` package (apt-get install -y prometheus)",
    );
  }
  sink = await new SmtpSink().start();
  stack = new Stack({
    run: `alerts${Date.now().toString(36)}`,
    kafkaBrokers: inject('kafkaBrokers'),
    databaseUrl: inject('databaseUrl'),
    portBase: 18_680,
    token: TOKEN,
    smtpPort: sink.port,
    env: (service) =>
      service === 'liveness'
        ? {
            GRACE_INBOUND_MS: String(GRACES.inboundMs),
            GRACE_OUTBOUND_MS: String(GRACES.outboundMs),
            GRACE_OVERDUE_MS: String(GRACES.overdueMs),
            REPLY_WINDOW_MS: String(GRACES.replyWindowMs),
            SWEEP_INTERVAL_MS: '250',
          }
        : {},
  });
  const kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: `${stack.run}-test` });
  producer = new EventProducer(kafka);
  raw = kafka.producer();
  await raw.connect();
  await stack.createTopics(3);
  // Prometheus first (its targets are down until the services listen), the planner last (it calls the
  // experiment service).
  prometheus = await Prometheus.start({
    dir: join(infraDir, 'prometheus', stack.run),
    targets: services.map((service) => ({ service, address: `127.0.0.1:${stack.port(service)}` })),
    rules: rulesWithShortFor(readFileSync(rulesFile, 'utf8'), FOR_FACTOR),
    intervalSeconds: 2,
  });
  await Promise.all((['experiment', 'sender', 'liveness'] as const).map((service) => stack.start(service)));
  await stack.start('planner');
}, 180_000);

afterAll(async () => {
  await prometheus?.stop();
  await raw?.disconnect();
  await producer?.disconnect();
  await stack?.stopAll('SIGTERM');
  await stack?.dropData(services);
  await sink?.stop();
});

const matches = (labels: Record<string, string>, wanted: Record<string, string>) =>
  Object.entries(wanted).every(([k, v]) => labels[k] === v);

async function alertsNamed(alertname: string, labels: Record<string, string> = {}): Promise<PrometheusAlert[]> {
  return (await prometheus.alerts()).filter((a) => a.labels.alertname === alertname && matches(a.labels, labels));
}

/** Waits until `alertname` fires with `labels` (and `value`, if given); its alert. */
async function firing(alertname: string, labels: Record<string, string>, value?: number): Promise<PrometheusAlert> {
  return waitFor(
    async () =>
      (await alertsNamed(alertname, labels)).find(
        (a) => a.state === 'firing' && (value === undefined || Number(a.value) === value),
      ),
    {
      timeoutMs: ALERT_TIMEOUT_MS,
      intervalMs: 500,
      description: `${alertname} ${JSON.stringify(labels)}${value === undefined ? '' : ` = ${value}`} to fire`,
    },
  ).catch(async (error: unknown) => {
    throw new Error(
      `${(error as Error).message}\nalerts: ${JSON.stringify(await prometheus.alerts())}\n${prometheus.logs()}\n${stack.tails()}`,
    );
  });
}

/** The single sample of an instant query (undefined when it has none). */
async function sample(expr: string): Promise<number | undefined> {
  const result = await prometheus.query(expr);
  expect(result.length, `${expr}: ${JSON.stringify(result)}`).toBeLessThanOrEqual(1);
  return result[0] === undefined ? undefined : Number(result[0].value[1]);
}

describe('a real Prometheus over the running services', () => {
  it('scrapes the four services and loads every rule of deploy/prometheus/rules.yml, `for:` shortened', async () => {
    await waitFor(
      async () => {
        const health = await prometheus.targetHealth();
        return services.every((s) => health[s] === 'up');
      },
      { timeoutMs: 20_000, intervalMs: 250, description: 'every service target to be up' },
    );
    const { groups } = await prometheus.api<{
      groups: Array<{ rules: Array<{ name: string; type: string; duration?: number; health: string }> }>;
    }>('rules');
    const loaded = groups.flatMap((g) => g.rules);
    const source = readFileSync(rulesFile, 'utf8');
    const declared = [...source.matchAll(/^\s+- alert: (\w+)$/gm)].map((m) => m[1]);
    expect(loaded.map((r) => r.name).sort()).toEqual([...declared].sort());
    const stalled = loaded.find((r) => r.name === 'OutreachStalledConversations');
    expect(stalled?.duration, '10m / 300').toBe(2);
    for (const rule of loaded) expect(rule.health, rule.name).not.toBe('err');
  });

  it('a garbage record on a consumed topic is dead-lettered and fires OutreachDeadLetters for its service, group and topic', async () => {
    const topic = topicName('outreachRequested', stack.prefix);
    const series = `outreach_consumer_messages_total{service="planner",topic="${topic}",result="dead_lettered"}`;
    // The consumer exports its dead_lettered series at 0 from the start: a counter born at 1 by the
    // first dead letter would show Prometheus no increase, and the alert would never fire for it.
    await waitFor(async () => (await sample(series)) === 0, {
      timeoutMs: 20_000,
      intervalMs: 250,
      description: `Prometheus to hold ${series} at 0 before any dead letter`,
    });
    await raw.send({ topic, messages: [{ key: 'garbage', value: Buffer.from('this is not an event') }] });

    const alert = await firing('OutreachDeadLetters', {
      service: 'planner',
      group: `${stack.run}-planner`,
      topic,
      severity: 'warning',
    });
    expect(alert.annotations.summary).toContain(`read the reasons on ${topic}.dlq`);
    expect(await sample(series)).toBe(1);
  });

  it("over one campaign's life, OutreachStalledConversations fires for stuck conversations only, and clears", async () => {
    const conversationTopic = topicName('conversationEvents', stack.prefix);
    const content = (subject: string) => [{ variant: null, subject, body: 'Would you like to talk about a role?' }];
    const candidate = (name: string, followUps: OutreachRequested['followUps']) =>
      outreachRequest({
        requestId: `${name}-intro`,
        campaignId: CAMPAIGN,
        candidateId: name,
        email: `${name}@example.com`,
        contents: content('A role for you'),
        followUps,
      });
    // finished: intro, then a follow-up a second later; nobody answers.
    const finished = candidate('finished', [{ step: 'follow-up', delayMs: 1_000, contents: content('Following up') }]);
    // waiting: its follow-up is ten minutes away: nothing is owed meanwhile.
    const waiting = candidate('waiting', [{ step: 'follow-up', delayMs: 600_000, contents: content('Following up') }]);
    // unsubscribed: unsubscribes after the intro; the follow-up is suppressed and the sequence ends.
    const unsubscribed = candidate('unsubscribed', [
      { step: 'follow-up', delayMs: 4_000, contents: content('Following up') },
    ]);
    // replied: the candidate answers the (one-step) sequence; nobody answers back.
    const replied = candidate('replied', []);
    // overdue: the agent schedules a call for now, and nobody makes it.
    const overdue = candidate('overdue', []);
    const id = (r: OutreachRequested) => `${CAMPAIGN}:${r.candidateId}`;
    const envelope = (r: OutreachRequested) => ({
      eventId: randomUUID(),
      occurredAt: Date.now(),
      producer: 'alerts-agent',
      correlationId: randomUUID(),
      causationId: null,
      conversationId: id(r),
      campaignId: CAMPAIGN,
      candidateKey: r.candidateId,
    });
    const publish = (...events: Array<MessageReceived | NextStepScheduled | ConversationClosed>) =>
      producer.publish(events.map((event) => ({ topic: conversationTopic, event })));
    interface Conversation {
      status: string;
      awaitingReplySince: string | null;
      closedReason: string | null;
      pendingStepId: string | null;
      stalledReason: string | null;
      stallCount: number;
    }
    const conversation = (r: OutreachRequested) =>
      stack.json<Conversation>('liveness', `/v1/conversations/${encodeURIComponent(id(r))}`);
    const until = (what: string, probe: () => Promise<boolean>, timeoutMs = 30_000) =>
      waitFor(probe, { timeoutMs, intervalMs: 250, description: what });
    const stalledNow = (reason: string) =>
      sample(`max by (reason) (outreach_liveness_stalled_conversations{reason="${reason}"})`);

    for (const r of [finished, waiting, unsubscribed, replied, overdue]) {
      await stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: ingressBody(r) });
    }
    // Their one-step sequences sent, `replied` and `overdue` await a reply: then the reply, and the call.
    await until('the one-step sequences to be sent', async () =>
      (await Promise.all([replied, overdue].map(conversation))).every((c) => c.awaitingReplySince !== null),
    );
    await until('the intro to the unsubscribing candidate to be sent', async () => {
      return (await conversation(unsubscribed)).pendingStepId === 'follow-up';
    });
    await stack.json('sender', `/v1/suppressions/${unsubscribed.email}`, {
      method: 'PUT',
      body: { reason: 'unsubscribe' },
    });
    await publish(
      { type: 'MessageReceived', ...envelope(replied), messageId: null },
      { type: 'NextStepScheduled', ...envelope(overdue), stepId: 'call', dueAt: Date.now() },
    );

    const noNextStep = await firing(
      'OutreachStalledConversations',
      { service: 'liveness', reason: 'no_next_step', severity: 'warning' },
      1,
    );
    expect(noNextStep.annotations.summary).toBe('1 open conversations are stalled (no_next_step)');
    await firing('OutreachStalledConversations', { service: 'liveness', reason: 'next_step_overdue' }, 1);
    expect((await conversation(replied)).stalledReason).toBe('no_next_step');
    expect((await conversation(overdue)).stalledReason).toBe('next_step_overdue');

    // The finished sequence, and the one the unsubscribe ended, wait out their reply window (past the
    // outbound and overdue graces) and are closed.
    await until('the finished sequences to be closed at the end of their reply window', async () => {
      const ended = await Promise.all([finished, unsubscribed].map(conversation));
      return ended.every((c) => c.status === 'closed' && c.closedReason === 'sequence_completed');
    });
    const delivered = (r: OutreachRequested) =>
      sink.messages.filter((m) => m.to.includes(r.email)).map((m) => m.subject);
    expect(delivered(finished)).toEqual(['A role for you', 'Following up']);
    expect(delivered(unsubscribed), 'the follow-up was suppressed').toEqual(['A role for you']);
    expect((await conversation(unsubscribed)).stallCount, 'the unsubscribed candidate was never flagged').toBe(0);
    const waitingNow = await conversation(waiting);
    expect(waitingNow).toMatchObject({ status: 'open', pendingStepId: 'follow-up', stallCount: 0 });
    expect((await conversation(finished)).stallCount, 'the finished sequence was never flagged').toBe(0);
    await until('the sequence_completed close to be scraped', async () => {
      const closes = await sample('sum(outreach_liveness_closes_total{reason="sequence_completed"})');
      return closes === 2;
    });
    // Over the whole run so far, each reason counted its one stuck conversation and nothing else.
    for (const reason of ['no_next_step', 'next_step_overdue']) {
      expect(
        await sample(`max(max_over_time(outreach_liveness_stalled_conversations{reason="${reason}"}[10m]))`),
        reason,
      ).toBe(1);
    }

    // A reply after the close reopens the conversation: someone owes the candidate an answer again.
    await publish({ type: 'MessageReceived', ...envelope(finished), messageId: null });
    await firing('OutreachStalledConversations', { service: 'liveness', reason: 'no_next_step' }, 2);

    // The agent closes the three: every stall lifts, and the alert resolves.
    await publish(
      ...[replied, overdue, finished].map((r): ConversationClosed => ({
        type: 'ConversationClosed',
        ...envelope(r),
        reason: null,
      })),
    );
    await until(
      'OutreachStalledConversations to resolve',
      async () =>
        (await alertsNamed('OutreachStalledConversations')).length === 0 &&
        (await stalledNow('no_next_step')) === 0 &&
        (await stalledNow('next_step_overdue')) === 0,
      ALERT_TIMEOUT_MS,
    );
    expect((await conversation(waiting)).stallCount).toBe(0);

    // Nothing else fires over a healthy stack: only the planted dead letter is still in its window.
    const others = (await prometheus.alerts()).filter(
      (a) =>
        a.state === 'firing' &&
        !['OutreachDeadLetters', 'OutreachDeadLetterRateHigh'].includes(a.labels.alertname ?? ''),
    );
    expect(others).toEqual([]);
  });
});

describe('the Grafana dashboard deploy/grafana/outreach.json', () => {
  it('every panel query runs in this Prometheus and names only metrics the running services expose', async () => {
    const exposed = new Set<string>();
    for (const service of services) {
      const text = await (await fetch(stack.url(service, '/metrics'))).text();
      for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
        exposed.add(name as string);
        if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) exposed.add(`${name}${suffix}`);
      }
    }
    expect(exposed.has('outreach_liveness_stalled_conversations')).toBe(true);

    const queries = dashboardQueries(readDashboard());
    expect(queries.length).toBeGreaterThan(30);
    const failures: string[] = [];
    let answered = 0;
    for (const { panel, refId, expr } of queries) {
      for (const name of metricNames(expr)) {
        if (!exposed.has(name)) failures.push(`${panel} ${refId}: ${name} is not exposed by any service`);
      }
      try {
        if ((await prometheus.query(expr)).length > 0) answered++;
      } catch (error) {
        failures.push(`${panel} ${refId}: ${(error as Error).message}`);
      }
    }
    expect(failures).toEqual([]);
    // Most panels show data after the run above (the rest need events it did not make: pauses, crashes).
    expect(answered, `${answered} of ${queries.length} queries answered`).toBeGreaterThan(queries.length / 2);

    // The service variable's query lists the four services.
    const values = await prometheus.api<string[]>('label/service/values', { 'match[]': 'outreach_build_info' });
    expect(values.sort()).toEqual([...services].sort());
  });
});
