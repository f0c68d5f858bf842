import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { html, path, query } from '../domain/html.js';
import type { Session } from '../security/session.js';
import { answerNotice, csrfField, isOperator, notice, sendPage } from '../views/layout.js';
import { allSamples, heldByCampaign, type KillSwitch } from './overview.js';

const CAMPAIGN = { minLength: 1, maxLength: 256 };
// The sender keeps 500 characters; the console adds who asked.
const REASON = { minLength: 1, maxLength: 400 };
const CampaignQuery = Type.Object({ campaignId: Type.Optional(Type.String({ maxLength: 256 })) });
const ConfirmQuery = Type.Object({
  action: Type.Union([Type.Literal('pause'), Type.Literal('resume')]),
  campaignId: Type.String(CAMPAIGN),
});
const CampaignAction = Type.Object({
  _csrf: Type.String({ maxLength: 128 }),
  campaignId: Type.String(CAMPAIGN),
  reason: Type.String(REASON),
});
const SendingConfirm = Type.Object({ paused: Type.Union([Type.Literal('true'), Type.Literal('false')]) });
const SendingAction = Type.Object({
  _csrf: Type.String({ maxLength: 128 }),
  paused: Type.Union([Type.Literal('true'), Type.Literal('false')]),
  reason: Type.String(REASON),
});

interface CampaignView {
  readonly campaignId: string;
  readonly paused: boolean;
  readonly pausedReason: string | null;
  readonly counts: Record<string, number>;
}

function actor(request: FastifyRequest) {
  const { session } = request;
  return { actor: session.user as string, via: session.via as 'local' | 'proxy' };
}

function campaignTable(campaigns: readonly CampaignView[], session: Session) {
  const operator = isOperator(session);
  return html`<table data-testid="campaigns">
    <tr>
      <th>campaign</th>
      <th>status</th>
      <th>reason</th>
      <th>sends by status</th>
      ${operator ? html`<th>action</th>` : ''}
    </tr>
    ${campaigns.map(
      (c) =>
        html`<tr data-campaign="${c.campaignId}">
          <td>${c.campaignId}</td>
          <td data-testid="campaign-status">${c.paused ? 'paused' : 'running'}</td>
          <td>${c.pausedReason}</td>
          <td>
            ${Object.entries(c.counts)
              .filter(([, n]) => n > 0)
              .map(([status, n]) => html`${status}: ${n} `)}
          </td>
          ${operator ? html`<td><a class="button" href="/campaigns/confirm${query({ action: c.paused ? 'resume' : 'pause', campaignId: c.campaignId })}">${c.paused ? 'Resume…' : 'Pause…'}</a></td>` : ''}
        </tr>`,
    )}
  </table>`;
}

function killSwitchSection(sending: KillSwitch | undefined, session: Session) {
  if (!sending) return notice('error', 'The kill switch cannot be read.');
  return html`<h2>Kill switch</h2>
    <p data-testid="kill-switch">
      ${sending.paused ? html`<strong>ON</strong>: every send of every campaign is held` : 'off: sending runs'}
      ${sending.reason ? html` (reason: ${sending.reason}; ${sending.changedAt})` : ''}
    </p>
    ${isOperator(session) ? html`<a class="button" href="/sending/confirm?paused=${sending.paused ? 'false' : 'true'}">${sending.paused ? 'Restart sending…' : 'Stop all sending…'}</a>` : ''}`;
}

export default async function campaignRoutes(app: FastifyInstance): Promise<void> {
  /** Campaigns the sender holds sends for, the one asked for, and those operators acted on lately. */
  app.get<{ Querystring: Static<typeof CampaignQuery> }>(
    '/campaigns',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: CampaignQuery } },
    async (request, reply) => {
      const asked = request.query.campaignId?.trim();
      const [samples, recent, sending] = await Promise.all([
        allSamples(app.services),
        app.audit.page(null, 200),
        app.services.read('sender', '/v1/sending'),
      ]);
      const ids = new Set<string>();
      if (asked) ids.add(asked);
      for (const c of heldByCampaign(samples.sender ?? [])) ids.add(c.campaign);
      for (const row of recent.rows) if (row.action.startsWith('campaign.')) ids.add(row.target);
      const listed = [...ids].slice(0, 60);
      const answers = await Promise.all(listed.map((id) => app.services.read('sender', path('/v1/campaigns', id))));
      const campaigns: CampaignView[] = [];
      const problems = answers.flatMap((answer, i) => {
        if (answer.status === 200) {
          campaigns.push(answer.body as CampaignView);
          return [];
        }
        return [html`<div>${listed[i]}: ${answerNotice(answer)}</div>`];
      });
      const content = html` <form method="get" action="/campaigns">
          <label>Campaign id <input name="campaignId" value="${asked ?? ''}" maxlength="256" /></label
          ><button type="submit">Show</button>
        </form>
        ${problems}
        ${campaigns.length === 0 ? html`<p>No campaign holds sends, and none was asked for.</p>` : campaignTable(campaigns, request.session)}
        ${killSwitchSection(sending.status === 200 ? (sending.body as KillSwitch) : undefined, request.session)}`;
      return sendPage(reply, request, 'Campaigns', content, '/campaigns');
    },
  );

  /** The confirmation step: what will happen, and the reason the audit keeps. */
  app.get<{ Querystring: Static<typeof ConfirmQuery> }>(
    '/campaigns/confirm',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: ConfirmQuery } },
    async (request, reply) => {
      const { action, campaignId } = request.query;
      if (!isOperator(request.session))
        return sendPage(reply, request, 'Campaigns', notice('refused', 'Your role may only read.'), '/campaigns', 403);
      const what =
        action === 'pause'
          ? 'Every send of this campaign not yet handed to the provider will be held (nothing is dropped).'
          : 'Every held send of this campaign will go out, each once.';
      const content = html`<p>
          ${action === 'pause' ? 'Pause' : 'Resume'} campaign <code data-testid="confirm-campaign">${campaignId}</code>?
          ${what}
        </p>
        <form method="post" action="/campaigns/${action}">
          ${csrfField(request.session)}
          <input type="hidden" name="campaignId" value="${campaignId}" />
          <label>Reason (kept in the audit) <textarea name="reason" required maxlength="400"></textarea></label>
          <button type="submit" data-testid="confirm">
            ${action === 'pause' ? 'Pause campaign' : 'Resume campaign'}
          </button>
          <a href="/campaigns${query({ campaignId })}">Cancel</a>
        </form>`;
      return sendPage(reply, request, `Confirm: ${action}`, content, '/campaigns');
    },
  );

  for (const action of ['pause', 'resume'] as const) {
    app.post<{ Body: Static<typeof CampaignAction> }>(
      `/campaigns/${action}`,
      { config: { scope: 'public', console: 'action' }, schema: { body: CampaignAction } },
      async (request, reply) => {
        const { campaignId, reason } = request.body;
        const answer = await app.services.operate(
          'sender',
          'POST',
          `${path('/v1/campaigns', campaignId)}/${action}`,
          action === 'pause' ? { reason: `${reason} (console: ${request.session.user})` } : {},
        );
        const ok = answer.status === 200;
        await app.audit.record({
          ...actor(request),
          action: `campaign.${action}`,
          target: campaignId,
          reason,
          outcome: ok ? 'done' : answer.status >= 400 && answer.status < 500 ? 'refused' : 'failed',
          detail: ok ? JSON.stringify(answer.body) : `${answer.status}: ${answer.message}`,
        });
        const content = html`${ok ? notice('ok', html`Campaign <code>${campaignId}</code> ${action === 'pause' ? 'paused' : 'resumed'}.`) : answerNotice(answer)}
          <p><a href="/campaigns${query({ campaignId })}">Back to the campaign</a></p>`;
        return sendPage(
          reply,
          request,
          'Campaigns',
          content,
          '/campaigns',
          ok ? 200 : answer.status === 0 ? 502 : answer.status,
        );
      },
    );
  }

  app.get<{ Querystring: Static<typeof SendingConfirm> }>(
    '/sending/confirm',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: SendingConfirm } },
    async (request, reply) => {
      if (!isOperator(request.session))
        return sendPage(
          reply,
          request,
          'Kill switch',
          notice('refused', 'Your role may only read.'),
          '/campaigns',
          403,
        );
      const stop = request.query.paused === 'true';
      const content = html`<p>
          ${stop ? 'Stop every send of every campaign, on every replica? Sends not yet handed to the provider are held, never dropped.' : 'Restart sending? Every held send goes out once, except those of campaigns paused on their own.'}
        </p>
        <form method="post" action="/sending">
          ${csrfField(request.session)}
          <input type="hidden" name="paused" value="${request.query.paused}" />
          <label>Reason (kept in the audit) <textarea name="reason" required maxlength="400"></textarea></label>
          <button type="submit" data-testid="confirm">${stop ? 'Stop all sending' : 'Restart sending'}</button>
          <a href="/campaigns">Cancel</a>
        </form>`;
      return sendPage(reply, request, 'Confirm: kill switch', content, '/campaigns');
    },
  );

  app.post<{ Body: Static<typeof SendingAction> }>(
    '/sending',
    { config: { scope: 'public', console: 'action' }, schema: { body: SendingAction } },
    async (request, reply) => {
      const paused = request.body.paused === 'true';
      const { reason } = request.body;
      const answer = await app.services.operate('sender', 'PUT', '/v1/sending', {
        paused,
        reason: `${reason} (console: ${request.session.user})`,
      });
      const ok = answer.status === 200;
      await app.audit.record({
        ...actor(request),
        action: paused ? 'sending.stop' : 'sending.restart',
        target: 'all campaigns',
        reason,
        outcome: ok ? 'done' : answer.status >= 400 && answer.status < 500 ? 'refused' : 'failed',
        detail: ok ? JSON.stringify(answer.body) : `${answer.status}: ${answer.message}`,
      });
      const body = answer.body as { released?: number; inFlight?: number } | undefined;
      const content = html`${
          ok
            ? notice(
                'ok',
                paused
                  ? html`Sending stopped; ${body?.inFlight ?? 0} send(s) were already with the provider.`
                  : html`Sending restarted; ${body?.released ?? 0} held send(s) released.`,
              )
            : answerNotice(answer)
        }
        <p><a href="/campaigns">Back to campaigns</a></p>`;
      return sendPage(
        reply,
        request,
        'Kill switch',
        content,
        '/campaigns',
        ok ? 200 : answer.status === 0 ? 502 : answer.status,
      );
    },
  );
}
