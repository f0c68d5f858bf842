/**
 * Personal data stays where it belongs (issue #15): the four services as processes run a small
 * demo-shaped workload (two ingresses, an experiment, follow-ups, replies, a suppression, a bounce
 * whose SMTP reply quotes the address, key variants, a refused address). Then every topic labelled
 * PII-free, every dead-letter header, every log line and every unauthenticated response is scanned
 * for every address used, in every spelling, and for the unsalted SHA-256 that would reverse to
 * one: 0 hits.
 */
import { createHash, randomUUID } from 'node:crypto';
import { domainToUnicode } from 'node:url';
import { createKafka, dlqTopicOf, EventProducer, topicName, topics, type TopicId } from '@outreach/shared';
import { canonicalAddress, eventCodec, type MessageReceived, type OutreachRequested } from '@outreach/contracts';
import { readTopic, SmtpSink, waitFor, type ReadMessage } from '@outreach/testkit';
import { expect, inject, it } from 'vitest';
import { dropRunData, ingressBody, outreachRequest, Stack, services } from '../../scripts/lib/stack.js';

const TOKEN = 'pii-scan-token';

/** Every way an address can be written down that we would count as the address. */
function spellings(address: string): string[] {
  const trimmed = address.trim();
  const forms = new Set([trimmed, trimmed.toLowerCase(), trimmed.normalize('NFKC').toLowerCase()]);
  const canonical = canonicalAddress(address);
  if (canonical) {
    forms.add(canonical.address).add(canonical.norm);
    const at = canonical.norm.lastIndexOf('@');
    forms.add(`${canonical.norm.slice(0, at)}@${domainToUnicode(canonical.norm.slice(at + 1))}`);
  }
  for (const form of [...forms]) {
    forms.add(encodeURIComponent(form));
    forms.add(form.replace('@', '%40'));
    // The old emailHash: anyone holding a list of addresses recomputes it, so it is the address.
    forms.add(createHash('sha256').update(form, 'utf8').digest('hex'));
  }
  return [...forms].filter((f) => f.length > 0);
}

it('no topic labelled PII-free, no DLQ header, no log line and no unauthenticated response carries an address', async () => {
  const kafkaBrokers = inject('kafkaBrokers');
  const databaseUrl = inject('databaseUrl');
  const run = `pii${Date.now().toString(36)}`;
  // The bounce's reply quotes the address, as real servers do.
  const sink = await new SmtpSink({
    behaviour: (to) =>
      to.startsWith('bounce')
        ? { reject: `5.1.1 <${to}>: Recipient address rejected: mailbox unavailable` }
        : undefined,
  }).start();
  const stack = new Stack({
    run,
    kafkaBrokers,
    databaseUrl,
    portBase: 18_380,
    token: TOKEN,
    smtpPort: sink.port,
    env: (service) => ({
      // Everything a service would log, request lines included.
      LOG_LEVEL: 'debug',
      ...(service === 'liveness'
        ? { GRACE_INBOUND_MS: '1000', GRACE_OUTBOUND_MS: '600000', GRACE_OVERDUE_MS: '60000', SWEEP_INTERVAL_MS: '300' }
        : {}),
    }),
  });
  const kafka = createKafka({ brokers: kafkaBrokers.split(','), clientId: `${run}-scan` });
  const producer = new EventProducer(kafka);
  try {
    await stack.createTopics(3);
    for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) await stack.start(service);

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
    await stack.json('sender', `/v1/suppressions/${encodeURIComponent('Unsubscribed@Example.com')}`, {
      method: 'PUT',
      body: { reason: 'unsubscribe' },
    });

    // The workload: 24 candidates, half in an A/B test with a follow-up; one suppressed, one bounce,
    // one with a Unicode domain; then key variants of some, and an address the platform refuses.
    const requests: OutreachRequested[] = [];
    for (let i = 0; i < 24; i++) {
      const ab = i < 12;
      const email =
        i === 13
          ? 'unsubscribed@example.com'
          : i === 14
            ? 'bounce14@example.com'
            : i === 15
              ? 'joerg@B\u00fccher.de'
              : `candidate${i}@example.com`;
      requests.push(
        outreachRequest({
          requestId: `r-${i}`,
          campaignId: ab ? 'Backend-Engineers' : 'product-designers',
          candidateId: `cand-${i}`,
          email,
          experimentId: ab ? 'subject-line' : null,
          contents: ab
            ? [
                { variant: 'short', subject: 'Quick question', body: 'Are you open to a backend role?' },
                { variant: 'personal', subject: `Hi cand-${i}`, body: 'We loved your work.' },
              ]
            : [{ variant: null, subject: 'A design role', body: 'Would you like to hear more?' }],
          followUps: ab
            ? [
                {
                  step: 'Follow-Up',
                  delayMs: 500,
                  contents: [{ variant: null, subject: 'Following up', body: 'Any thoughts?' }],
                },
              ]
            : [],
        }),
      );
    }
    const variants = requests
      .filter((_, i) => i % 5 === 2)
      .map((r) => ({
        ...r,
        eventId: randomUUID(),
        requestId: `${r.requestId}-variant`,
        campaignId: ` ${r.campaignId.toUpperCase()}\u200b`,
        step: 'INTRO',
        email: `  ${r.email.toUpperCase()}\ufeff `,
      }));
    const refused = outreachRequest({
      requestId: 'r-refused',
      campaignId: 'product-designers',
      candidateId: 'cand-x',
      email: '\uff41da.refused@example.com',
    });
    const viaHttp = requests.filter((_, i) => i % 3 === 0);
    const viaKafka = [...requests.filter((_, i) => i % 3 !== 0), ...variants, refused];
    await producer.publish(viaKafka.map((event) => ({ topic: topicName('outreachRequested', stack.prefix), event })));
    for (const r of viaHttp)
      await stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: ingressBody(r) });
    const refusedOverHttp = await fetch(stack.url('planner', '/v1/outreach-requests'), {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(ingressBody({ ...refused, requestId: 'r-refused-http' })),
    });
    expect(refusedOverHttp.status).toBe(400);
    // Authenticated lookups whose paths and query strings carry addresses (request logs must not).
    await stack.json(
      'sender',
      `/v1/sends/check?campaignId=product-designers&candidateId=cand-20&step=intro&email=${encodeURIComponent('candidate20@example.com')}`,
    );
    await stack.json('sender', '/v1/suppressions/unsubscribed@example.com');

    // Replies: a few candidates answer (the planner cancels their follow-ups; liveness flags them).
    const reply = (r: OutreachRequested): MessageReceived => ({
      type: 'MessageReceived',
      eventId: randomUUID(),
      occurredAt: Date.now(),
      producer: 'pii-agent',
      correlationId: randomUUID(),
      causationId: null,
      conversationId: `${r.campaignId.toLowerCase()}:${r.candidateId}`,
      campaignId: r.campaignId.toLowerCase(),
      candidateKey: r.candidateId,
      messageId: null,
    });
    await producer.publish(
      requests
        .filter((_, i) => i % 7 === 1)
        .map((r) => ({ topic: topicName('conversationEvents', stack.prefix), event: reply(r) })),
    );

    // Done when every canonical send has an outcome and no follow-up is still scheduled.
    let previous = '';
    let stable = 0;
    await waitFor(
      async () => {
        const counts: Record<string, number> = {};
        for (const campaign of ['backend-engineers', 'product-designers']) {
          const body = await stack.json<{ counts: Record<string, number> }>('sender', `/v1/campaigns/${campaign}`);
          for (const [k, v] of Object.entries(body.counts)) counts[k] = (counts[k] ?? 0) + v;
        }
        const steps = (await stack.json<{ steps: Array<{ status: string }> }>('planner', '/v1/steps/summary')).steps;
        const terminal = ['sent', 'suppressed', 'failed', 'ambiguous'].reduce((n, k) => n + (counts[k] ?? 0), 0);
        const snapshot = JSON.stringify({ counts, steps });
        stable = snapshot === previous ? stable + 1 : 0;
        previous = snapshot;
        return (
          terminal >= requests.length &&
          !steps.some((s) => s.status === 'scheduled') &&
          !counts.claimed &&
          !counts.sending &&
          stable >= 3
        );
      },
      { timeoutMs: 120_000, intervalMs: 1_000, description: 'every send of the workload to reach an outcome' },
    );
    expect(sink.messages.length).toBeGreaterThanOrEqual(20);

    // ------------------------------------------------------------------ the scan
    const used = [...requests, ...variants, refused].map((r) => r.email).concat(['Unsubscribed@Example.com']);
    const needles = [...new Set(used.flatMap(spellings))];
    const hits: string[] = [];
    const scan = (where: string, text: string) => {
      const lower = text.toLowerCase();
      for (const needle of needles) if (lower.includes(needle.toLowerCase())) hits.push(`${where}: ${needle}`);
    };

    const admin = kafka.admin();
    await admin.connect();
    const readAll = async (topic: string): Promise<ReadMessage[]> => {
      const total = (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
      return total === 0 ? [] : readTopic(kafka, topic, (m) => m.length >= total);
    };
    let scanned = 0;
    for (const [id, spec] of Object.entries(topics) as Array<[TopicId, (typeof topics)[TopicId]]>) {
      const topic = topicName(id, stack.prefix);
      if (!spec.pii) {
        for (const message of await readAll(topic)) {
          scanned++;
          const where = `${topic}@${message.partition}:${message.offset}`;
          scan(`${where} key`, message.key ?? '');
          scan(`${where} headers`, JSON.stringify(message.headers));
          scan(`${where} bytes`, message.value?.toString('utf8') ?? '');
          scan(`${where} event`, JSON.stringify(eventCodec.decode(message.value as Buffer)));
        }
      }
      // Dead letters keep the original bytes (PII on a PII topic's DLQ); their headers are ours.
      for (const message of await readAll(dlqTopicOf(topic))) {
        scan(`${dlqTopicOf(topic)}@${message.offset} headers`, JSON.stringify(message.headers));
        if (!spec.pii) scan(`${dlqTopicOf(topic)}@${message.offset} bytes`, message.value?.toString('utf8') ?? '');
      }
    }
    await admin.disconnect();
    expect(scanned).toBeGreaterThan(40);

    for (const service of services) {
      for (const path of ['/metrics', '/health/live', '/health/ready']) {
        const response = await fetch(stack.url(service, path));
        scan(`GET ${service}${path} (no token)`, await response.text());
      }
    }
    for (const path of [
      `/v1/suppressions/${encodeURIComponent('unsubscribed@example.com')}`,
      `/v1/sends/check?campaignId=product-designers&candidateId=cand-20&step=intro&email=candidate20@example.com`,
      '/v1/sends?status=sent',
      '/v1/sends?status=failed',
      '/v1/reports/duplicates',
      '/v1/campaigns/backend-engineers',
    ]) {
      const response = await fetch(stack.url('sender', path));
      expect(response.status, path).toBe(401);
      scan(`GET sender${path} (no token)`, await response.text());
    }
    const unknown = await fetch(
      stack.url('sender', '/v1/nothing/candidate20@example.com?email=candidate20@example.com'),
    );
    scan('GET sender unknown path (no token)', await unknown.text());

    const logLines = [...stack.processes].flatMap(([key, proc]) =>
      [...proc.stdoutLines, ...proc.stderrLines].map((line) => [key, line] as const),
    );
    for (const [key, line] of logLines) scan(`log ${key}`, line);
    // The scan saw the lines that would have carried addresses, masked.
    expect(logLines.some(([, line]) => line.includes('/v1/suppressions/[address]'))).toBe(true);

    expect(hits).toEqual([]);
  } finally {
    await producer.disconnect().catch(() => undefined);
    await stack.stopAll().catch(() => stack.killAll());
    await sink.stop();
    await dropRunData(
      { kafkaBrokers, databaseUrl },
      stack.prefix,
      services.map((s) => stack.schema(s)),
    ).catch(() => undefined);
  }
}, 300_000);
