import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { html, path, query, type Html } from '../domain/html.js';
import type { Answer } from '../adapters/services.js';
import type { Session } from '../security/session.js';
import { answerNotice, csrfField, isOperator, notice, sendPage } from '../views/layout.js';
import { allSamples, heldByCampaign, type KillSwitch } from './overview.js';

const CAMPAIGN = { minLength: 1, maxLength: 256 };
// The sender keeps 500 characters; the console adds who asked.
const REASON = { minLength: 1, maxLength: 400 };
const CampaignQuery = Type.Object({
  campaignId: Type.Optional(Type.String({ maxLength: 256 })),
  /** The sender's cursor: the last campaign id of the previous page. */
  after: Type.Optional(Type.String({ maxLength: 256 })),
  paused: Type.Optional(Type.Literal('true')),
  held: Type.Optional(Type.Literal('true')),
});
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
  readonly pausedAt?: string | null;
  readonly counts: Record<string, number>;
  /** From the list (GET /v1/campaigns): held sends and the error rate over the auto-pause window. */
  readonly held?: number;
  readonly errors?: { readonly attempts: number; readonly failures: number; readonly rate: number | null };
}

const errorRate = (c: CampaignView) =>
  c.errors === undefined
    ? ''
    : c.errors.rate === null
      ? 'no attempt'
      : `${(c.errors.rate * 100).toFixed(1)}% (${c.errors.failures}/${c.errors.attempts})`;

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
      <th>reason (an auto-pause's too)</th>
      <th>sends by status</th>
      <th>held</th>
      <th>provider error rate (auto-pause window)</th>
      ${operator ? html`<th>action</th>` : ''}
    </tr>
    ${campaigns.map(
      (c) =>
        html`<tr data-campaign="${c.campaignId}">
          <td><a href="/campaigns${query({ campaignId: c.campaignId })}">${c.campaignId}</a></td>
          <td data-testid="campaign-status">${c.paused ? 'paused' : 'running'}</td>
          <td data-field="reason">${c.pausedReason}${c.pausedAt ? html` <small>(${c.pausedAt})</small>` : ''}</td>
          <td data-field="counts">
            ${Object.entries(c.counts)
              .filter(([, n]) => n > 0)
              .map(([status, n]) =>
                status === 'ambiguous'
                  ? html`<a href="/ambiguous${query({ campaignId: c.campaignId })}">${status}: ${n}</a> `
                  : html`${status}: ${n} `,
              )}
          </td>
          <td data-field="held">${c.held ?? c.counts.held ?? 0}</td>
          <td data-field="error-rate">${errorRate(c)}</td>
          ${operator ? html`<td><a class="button" href="/campaigns/confirm${query({ action: c.paused ? 'resume' : 'pause', campaignId: c.campaignId })}">${c.paused ? 'Resume…' : 'Pause…'}</a></td>` : ''}
        </tr>`,
    )}
  </table>`;
}

interface DuplicateGroup {
  readonly step: string;
  readonly kind: 'address' | 'candidate';
  readonly key: string;
  readonly count: number;
  readonly sources: readonly string[];
  readonly firstAt: string;
  readonly lastAt: string;
}

/** The sender's duplicates report for one campaign: deliveries to one candidate or address at one step. */
function duplicatesSection(answer: Answer) {
  if (answer.status !== 200)
    return html`<h2>Duplicates</h2>
      ${answerNotice(answer)}`;
  const { duplicates, total } = answer.body as { duplicates: DuplicateGroup[]; total: number };
  return html`<h2>Duplicates</h2>
    <p>
      Deliveries to one candidate or one address at one step, from the sent log and imported provider history
      (docs/operations.md, section 4): <strong data-testid="duplicates-total">${total}</strong>.
    </p>
    ${
      total === 0
        ? ''
        : html`<table data-testid="duplicates">
            <tr>
              <th>step</th>
              <th>by</th>
              <th>candidate key</th>
              <th>deliveries</th>
              <th>sources</th>
              <th>first</th>
              <th>last</th>
            </tr>
            ${duplicates.map(
              (d) =>
                html`<tr>
                  <td>${d.step}</td>
                  <td>${d.kind}</td>
                  <td>${d.kind === 'candidate' ? d.key : '(an address: not shown)'}</td>
                  <td>${d.count}</td>
                  <td>${d.sources.join(', ')}</td>
                  <td>${d.firstAt}</td>
                  <td>${d.lastAt}</td>
                </tr>`,
            )}
          </table>`
    }`;
}

function killSwitchSection(sending: KillSwitch | undefined, session: Session) {
  if (!sending) return notice('error', 'The kill switch cannot be read.');
  return html`<h2 id="kill-switch">Kill switch</h2>
    <p data-testid="kill-switch">
      ${sending.paused ? html`<strong>ON</strong>: every send of every campaign is held` : 'off: sending runs'}
      ${sending.reason ? html` (reason: ${sending.reason}; ${sending.changedAt})` : ''}
    </p>
    ${isOperator(session) ? html`<a class="button" href="/sending/confirm?paused=${sending.paused ? 'false' : 'true'}">${sending.paused ? 'Restart sending…' : 'Stop all sending…'}</a>` : ''}`;
}

export default async function campaignRoutes(app: FastifyInstance): Promise<void> {
  /**
   * Every campaign, a page at a time (the sender's list, by id), or the paused ones, or those the
   * held-sends gauge names, or the one asked for (with its skipped duplicates).
   */
  app.get<{ Querystring: Static<typeof CampaignQuery> }>(
    '/campaigns',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: CampaignQuery } },
    async (request, reply) => {
      const asked = request.query.campaignId?.trim();
      const { after, paused, held } = request.query;
      const limit = Math.min(100, app.consoleConfig.CONSOLE_PAGE_SIZE);
      const [sending, recent] = await Promise.all([
        app.services.read('sender', '/v1/sending'),
        app.audit.page(null, 200),
      ]);
      const campaigns: CampaignView[] = [];
      const problems: Html[] = [];
      let next: string | null = null;
      let heading: string;
      if (asked || held) {
        const ids = asked
          ? [asked]
          : heldByCampaign((await allSamples(app.services)).sender ?? []).map((c) => c.campaign);
        heading = asked ? 'The campaign' : "Campaigns holding sends (the sender's held-sends gauge)";
        const listed = ids.slice(0, 60);
        const answers = await Promise.all(listed.map((id) => app.services.read('sender', path('/v1/campaigns', id))));
        answers.forEach((answer, i) => {
          if (answer.status === 200) campaigns.push(answer.body as CampaignView);
          else problems.push(html`<div>${listed[i]}: ${answerNotice(answer)}</div>`);
        });
      } else {
        heading = paused ? 'Paused campaigns' : 'Every campaign';
        const answer = await app.services.read('sender', `/v1/campaigns${query({ after, limit, paused })}`);
        if (answer.status === 200) {
          const body = answer.body as { campaigns: CampaignView[]; next: string | null };
          campaigns.push(...body.campaigns);
          next = body.next;
        } else problems.push(answerNotice(answer));
      }
      // Seed 000-1 and 000-2's first question: were any mailed twice? (Addresses never reach the page.)
      const duplicates = asked
        ? await app.services.read('sender', `/v1/reports/duplicates${query({ campaignId: asked })}`)
        : undefined;
      const lately = [
        ...new Set(recent.rows.filter((row) => row.action.startsWith('campaign.')).map((row) => row.target)),
      ].slice(0, 20);
      const content = html` <form method="get" action="/campaigns">
          <label>Campaign id <input name="campaignId" value="${asked ?? ''}" maxlength="256" /></label
          ><button type="submit">Show</button>
        </form>
        <p>
          <a href="/campaigns">Every campaign</a> · <a href="/campaigns?paused=true">Paused</a> ·
          <a href="/campaigns?held=true">Holding sends</a>
        </p>
        <h2>${heading}</h2>
        ${problems}
        ${campaigns.length === 0 ? html`<p data-testid="no-campaigns">No campaign${after ? ' after this one' : ''}.</p>` : campaignTable(campaigns, request.session)}
        ${duplicates ? duplicatesSection(duplicates) : ''}
        ${next ? html`<p><a data-testid="next-page" href="/campaigns${query({ after: next, paused })}">Next page</a></p>` : ''}
        ${lately.length > 0 ? html`<p>Acted on lately: ${lately.map((id) => html`<a href="/campaigns${query({ campaignId: id })}">${id}</a> `)}</p>` : ''}
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
