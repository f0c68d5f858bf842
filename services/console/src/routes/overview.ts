import type { FastifyInstance } from 'fastify';
import type { DeadLetterTopic } from '../adapters/dead-letters.js';
import { parseSamples, total, type Sample } from '../adapters/prometheus-text.js';
import { serviceNames, type Services } from '../adapters/services.js';
import { html, query } from '../domain/html.js';
import { backlogOf, sendRates, type Backlog } from '../adapters/overview-figures.js';
import { formatRate, outcomesOf, rateChart } from '../domain/outcome-series.js';
import { answerNotice, notice, sendPage } from '../views/layout.js';

export interface KillSwitch {
  readonly paused: boolean;
  readonly reason: string | null;
  readonly changedAt: string | null;
  readonly changedBy: string | null;
}

/** Every service's /metrics, parsed (an empty list for one that did not answer). */
export async function allSamples(services: Services): Promise<Record<string, Sample[]>> {
  const answers = await Promise.all(serviceNames.map((s) => services.open(s, '/metrics')));
  return Object.fromEntries(
    serviceNames.map((s, i) => {
      const answer = answers[i];
      return [s, answer?.status === 200 && typeof answer.body === 'string' ? parseSamples(answer.body) : []];
    }),
  );
}

/** The campaigns the sender's held-sends gauge names (its label is bounded: 50 and two buckets). */
export function heldByCampaign(samples: readonly Sample[]): Array<{ campaign: string; held: number }> {
  return samples
    .filter((s) => s.name === 'outreach_sender_held_sends' && s.value > 0)
    .map((s) => ({ campaign: s.labels.campaign ?? '', held: s.value }))
    .filter((c) => c.campaign !== '' && !c.campaign.startsWith('_'))
    .sort((a, b) => b.held - a.held || a.campaign.localeCompare(b.campaign));
}

const shown = (value: unknown) => (value === undefined ? 'unknown' : String(value));

const card = (label: string, value: unknown, testId: string, href: string, note = '') =>
  html`<div class="card">
    <div>${label}</div>
    <div class="value"><a data-testid="${testId}" href="${href}">${shown(value)}</a></div>
    ${note ? html`<small>${note}</small>` : ''}
  </div>`;

const ageText = (seconds: number | undefined) =>
  seconds === undefined ? 'unknown' : seconds < 120 ? `${seconds.toFixed(0)} s` : `${(seconds / 60).toFixed(0)} min`;

/** DLQ depth per topic when the dead-letter pages are on; why not otherwise. */
async function deadLetterDepths(
  app: FastifyInstance,
): Promise<{ topics: DeadLetterTopic[] } | { off: true } | { error: string }> {
  if (!app.deadLetters) return { off: true };
  try {
    return { topics: await app.deadLetters.topics() };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

export default async function overviewRoutes(app: FastifyInstance): Promise<void> {
  app.get('/', { config: { scope: 'public', console: 'page' } }, async (request, reply) => {
    const [sending, samples, ready, stalled, dlq, paused] = await Promise.all([
      app.services.read('sender', '/v1/sending'),
      allSamples(app.services),
      Promise.all(serviceNames.map((s) => app.services.open(s, '/health/ready'))),
      app.services.read('liveness', '/v1/conversations/stalled?limit=100'),
      deadLetterDepths(app),
      app.services.read('sender', '/v1/campaigns?paused=true&limit=100'),
    ]);
    const sender = samples.sender ?? [];
    const held = heldByCampaign(sender);
    const backlogs = serviceNames.map((s) => backlogOf(s, samples[s] ?? []));
    const deadLettered = serviceNames.reduce(
      (sum, s) =>
        sum +
        (samples[s] ?? [])
          .filter((x) => x.name === 'outreach_consumer_messages_total' && x.labels.result === 'dead_lettered')
          .reduce((n, x) => n + x.value, 0),
      0,
    );
    const killSwitch = sending.status === 200 ? (sending.body as KillSwitch) : undefined;
    const stalledBody =
      stalled.status === 200 ? (stalled.body as { conversations: unknown[]; next: string | null }) : undefined;
    const pausedBody =
      paused.status === 200 ? (paused.body as { campaigns: unknown[]; next: string | null }) : undefined;
    const sampler = app.outcomes;
    const to = Date.now();
    const from = to - sampler.windowMs;
    const points = sampler.series.rates(from);
    const rates = sendRates(points);
    const outcomeTotals = Object.fromEntries(
      outcomesOf(points).map((o) => [o, Math.round(points.reduce((n, p) => n + (p.perSecond[o] ?? 0) * p.seconds, 0))]),
    );
    const windowMinutes = Math.round(sampler.windowMs / 60_000);
    const sumOf = (pick: (b: Backlog) => number | undefined) => {
      const known = backlogs.map(pick).filter((v): v is number => v !== undefined);
      return known.length === 0 ? undefined : known.reduce((a, b) => a + b, 0);
    };
    const oldest = (() => {
      const known = backlogs.map((b) => b.outboxAgeSeconds).filter((v): v is number => v !== undefined);
      return known.length === 0 ? undefined : Math.max(...known);
    })();
    const dlqTotal = 'topics' in dlq ? dlq.topics.reduce((n, t) => n + t.depth, 0) : undefined;
    const content = html` <div class="cards">
        ${card('Sends per second', rates.now === undefined ? undefined : formatRate(rates.now), 'sends-per-second', '#outcomes', rates.mean === undefined ? 'not sampled yet' : `${formatRate(rates.mean)}/s over ${windowMinutes} min`)}
        ${card('Ambiguous sends', total(sender, 'outreach_sender_ambiguous_sends'), 'ambiguous-count', '/ambiguous', 'waiting for an operator')}
        ${card(
          'Held sends',
          // The gauge has a series per campaign holding sends, none when nothing is held: a sender
          // that answered with no such series holds none.
          sender.length > 0 ? (total(sender, 'outreach_sender_held_sends') ?? 0) : undefined,
          'held-count',
          '/campaigns?held=true',
          'campaign or sending paused',
        )}
        ${card('Campaigns holding sends', held.length, 'held-campaigns', '/campaigns?held=true')}
        ${card('Paused campaigns', pausedBody ? `${pausedBody.campaigns.length}${pausedBody.next ? '+' : ''}` : undefined, 'paused-count', '/campaigns?paused=true')}
        ${card('Kill switch', killSwitch ? (killSwitch.paused ? 'ON: all sending stopped' : 'off') : undefined, 'kill-switch', '/campaigns#kill-switch')}
        ${card('Stalled conversations', stalledBody ? `${stalledBody.conversations.length}${stalledBody.next ? '+' : ''}` : undefined, 'stalled-count', '/stalled')}
        ${card(
          'Consumer lag (messages)',
          sumOf((b) => b.lag),
          'lag-total',
          '#backlog',
          "every service's consumers",
        )}
        ${card('Oldest unpublished outbox row', ageText(oldest), 'outbox-age', '#backlog')}
        ${card(
          'Parked outbox rows',
          sumOf((b) => b.parkedRows),
          'parked-count',
          '#backlog',
          'docs/operations.md: outbox_parked',
        )}
        ${card('Dead letters', 'off' in dlq ? 'not configured' : dlqTotal, 'dlq-total', '/dlq', 'topics' in dlq ? 'records in every DLQ' : 'off' in dlq ? `${deadLettered} dead-lettered since the services started` : 'Kafka did not answer')}
      </div>
      ${sending.status === 200 ? '' : answerNotice(sending)}
      ${killSwitch?.paused ? html`<p>Sending stopped: <span data-testid="kill-reason">${killSwitch.reason}</span> (${killSwitch.changedAt})</p>` : ''}
      <h2 id="outcomes">Sends and outcomes, last ${windowMinutes} minutes</h2>
      ${
        points.length === 0
          ? html`<p data-testid="outcomes-empty">
              No rate yet: the console reads the sender's counters every ${Math.round(sampler.intervalMs / 1000)} s and
              needs two reads of one sender process
              ${sampler.lastError ? html` (last read: ${sampler.lastError})` : ''}. It keeps ${windowMinutes} minutes in
              memory and starts empty; Prometheus keeps the history.
            </p>`
          : html`${rateChart(points, from, to, `Outcomes per second, last ${windowMinutes} minutes`)}
              <table data-testid="outcome-totals">
                <tr>
                  <th>outcome</th>
                  <th>now (/s)</th>
                  <th>in the window</th>
                </tr>
                ${Object.entries(outcomeTotals).map(
                  ([o, n]) =>
                    html`<tr data-outcome="${o}">
                      <td>${o}</td>
                      <td>${formatRate(points.at(-1)?.perSecond[o] ?? 0)}</td>
                      <td data-field="count">
                        ${o === 'ambiguous' ? html`<a href="/ambiguous">${n}</a>` : o === 'held' ? html`<a href="/campaigns?held=true">${n}</a>` : String(n)}
                      </td>
                    </tr>`,
                )}
              </table>
              <p>
                <small
                  >From the sender replica the console reaches, read every ${Math.round(sampler.intervalMs / 1000)} s
                  into memory (restarts empty; Prometheus keeps the
                  history).${sampler.lastError ? html` Last read: ${sampler.lastError}.` : ''}</small
                >
              </p>`
      }
      <h2 id="backlog">Backlog</h2>
      <table data-testid="backlog">
        <tr>
          <th>service</th>
          <th>consumer lag</th>
          <th>oldest unpublished outbox row</th>
          <th>parked outbox rows</th>
        </tr>
        ${backlogs.map(
          (b) =>
            html`<tr data-service="${b.service}">
              <td>${b.service}</td>
              <td data-field="lag">${shown(b.lag)}</td>
              <td data-field="outbox-age">${ageText(b.outboxAgeSeconds)}</td>
              <td data-field="parked">${shown(b.parkedRows)}</td>
            </tr>`,
        )}
      </table>
      ${
        backlogs.some((b) => b.lagByTopic.some((t) => t.lag > 0))
          ? html`<table data-testid="lag-by-topic">
              <tr>
                <th>service</th>
                <th>group</th>
                <th>topic</th>
                <th>lag</th>
              </tr>
              ${backlogs.flatMap((b) =>
                b.lagByTopic
                  .filter((t) => t.lag > 0)
                  .map(
                    (t) =>
                      html`<tr>
                        <td>${b.service}</td>
                        <td>${t.group}</td>
                        <td>${t.topic}</td>
                        <td>${t.lag}</td>
                      </tr>`,
                  ),
              )}
            </table>`
          : ''
      }
      <p>
        <small>Parked rows: docs/operations.md, the <code>outbox_parked</code> runbook.</small>
      </p>
      <h2 id="dead-letters">Dead letters by topic</h2>
      ${
        'off' in dlq
          ? html`<p data-testid="dlq-off">
              The dead-letter pages are off (no <code>KAFKA_BROKERS</code> for the console: docs/operations.md, 12a), so
              no depth per topic. Messages dead-lettered since each service started: ${deadLettered}.
            </p>`
          : 'error' in dlq
            ? notice('error', html`Kafka did not answer: ${dlq.error}`)
            : html`<table data-testid="dlq-depths">
                <tr>
                  <th>dead-letter topic</th>
                  <th>records</th>
                </tr>
                ${dlq.topics.map(
                  (t) =>
                    html`<tr data-dlq="${t.dlq}">
                      <td>${t.dlq}</td>
                      <td><a data-field="depth" href="/dlq${query({ topic: t.dlq })}">${t.depth}</a></td>
                    </tr>`,
                )}
              </table>`
      }
      <h2>Services</h2>
      <table>
        <tr>
          <th>service</th>
          <th>ready</th>
        </tr>
        ${serviceNames.map(
          (s, i) =>
            html`<tr>
              <td>${s}</td>
              <td data-testid="ready-${s}">
                ${ready[i]?.status === 200 ? 'ready' : ready[i]?.status === 0 ? 'unreachable' : 'not ready'}
              </td>
            </tr>`,
        )}
      </table>
      <h2>Campaigns holding sends</h2>
      ${
        held.length === 0
          ? html`<p>None.</p>`
          : html`<table>
              <tr>
                <th>campaign</th>
                <th>held</th>
              </tr>
              ${held.map(
                (c) =>
                  html`<tr>
                    <td><a href="/campaigns?campaignId=${encodeURIComponent(c.campaign)}">${c.campaign}</a></td>
                    <td>${c.held}</td>
                  </tr>`,
              )}
            </table>`
      }`;
    return sendPage(reply, request, 'Overview', content, '/');
  });
}
