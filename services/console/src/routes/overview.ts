import type { FastifyInstance } from 'fastify';
import { parseSamples, total, type Sample } from '../adapters/prometheus-text.js';
import { serviceNames, type Services } from '../adapters/services.js';
import { html } from '../domain/html.js';
import { answerNotice, sendPage } from '../views/layout.js';

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

const card = (label: string, value: unknown, testId: string, note = '') =>
  html`<div class="card">
    <div>${label}</div>
    <div class="value" data-testid="${testId}">${value === undefined ? 'unknown' : String(value)}</div>
    ${note ? html`<small>${note}</small>` : ''}
  </div>`;

export default async function overviewRoutes(app: FastifyInstance): Promise<void> {
  app.get('/', { config: { scope: 'public', console: 'page' } }, async (request, reply) => {
    const [sending, samples, ready, stalled] = await Promise.all([
      app.services.read('sender', '/v1/sending'),
      allSamples(app.services),
      Promise.all(serviceNames.map((s) => app.services.open(s, '/health/ready'))),
      app.services.read('liveness', '/v1/conversations/stalled?limit=100'),
    ]);
    const sender = samples.sender ?? [];
    const held = heldByCampaign(sender);
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
    const content = html` <div class="cards">
        ${card('Ambiguous sends', total(sender, 'outreach_sender_ambiguous_sends'), 'ambiguous-count', 'waiting for an operator')}
        ${card('Held sends', total(sender, 'outreach_sender_held_sends'), 'held-count', 'campaign or sending paused')}
        ${card('Campaigns holding sends', held.length, 'held-campaigns')}
        ${card('Kill switch', killSwitch ? (killSwitch.paused ? 'ON: all sending stopped' : 'off') : undefined, 'kill-switch')}
        ${card('Stalled conversations', stalledBody ? `${stalledBody.conversations.length}${stalledBody.next ? '+' : ''}` : undefined, 'stalled-count')}
        ${card('Dead-lettered since start', deadLettered, 'dead-lettered', 'no service API gives DLQ depth: see docs/operations.md, section 7')}
      </div>
      ${sending.status === 200 ? '' : answerNotice(sending)}
      ${killSwitch?.paused ? html`<p>Sending stopped: <span data-testid="kill-reason">${killSwitch.reason}</span> (${killSwitch.changedAt})</p>` : ''}
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
