import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { html, path, query } from '../domain/html.js';
import { answerNotice, csrfField, isOperator, notice, sendPage } from '../views/layout.js';

/** What the sender's API shows of a send (never the address or the body). */
export interface SendView {
  readonly sendId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly emailHash: string;
  readonly step: string;
  readonly experimentId: string | null;
  readonly variant: string | null;
  readonly status: string;
  readonly reason: string | null;
  readonly source?: string | null;
  readonly attempts: number;
  readonly providerMessageId: string | null;
  readonly claimedAt: string | null;
  readonly sentAt: string | null;
  readonly updatedAt: string;
  /** The Message-ID it went out under: what to look for in the provider's logs. */
  readonly messageId?: string | null;
  /** Set while a late reply or the lookup's verdict is still awaited (a retry is refused until then). */
  readonly verdictAwaitedUntil?: string | null;
}

/** What waits behind a send at the planner: the candidate's other scheduled steps, and follow-ups. */
interface Waiting {
  readonly scheduled: number;
  readonly followUps: number;
}

/** A checkbox of the selection form: `s-<sendId>`. */
const PICK = /^s-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

const ListQuery = Type.Object({
  campaignId: Type.Optional(Type.String({ maxLength: 256 })),
  after: Type.Optional(Type.String({ format: 'uuid' })),
});
const ResolveManyBody = Type.Object(
  {
    _csrf: Type.String({ maxLength: 128 }),
    resolution: Type.Union([Type.Literal('sent'), Type.Literal('retry')]),
    reason: Type.String({ minLength: 1, maxLength: 400 }),
  },
  // The picked sends, `s-<sendId>=1` each: checked below, and at most a page of them.
  { additionalProperties: Type.Literal('1') },
);
const ResolveBody = Type.Object({
  _csrf: Type.String({ maxLength: 128 }),
  sendId: Type.String({ format: 'uuid' }),
  resolution: Type.Union([Type.Literal('sent'), Type.Literal('retry')]),
  reason: Type.String({ minLength: 1, maxLength: 400 }),
});

export default async function ambiguousRoutes(app: FastifyInstance): Promise<void> {
  /** The work queue: ambiguous sends with the evidence the sender gives, a page at a time. */
  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/ambiguous',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: ListQuery } },
    async (request, reply) => {
      const campaignId = request.query.campaignId?.trim() || undefined;
      const limit = app.consoleConfig.CONSOLE_PAGE_SIZE;
      const answer = await app.services.read(
        'sender',
        `/v1/sends${query({ status: 'ambiguous', campaignId, after: request.query.after, limit })}`,
      );
      if (answer.status !== 200)
        return sendPage(reply, request, 'Ambiguous sends', answerNotice(answer), '/ambiguous', 502);
      const { sends, next } = answer.body as { sends: SendView[]; next: string | null };
      const operator = isOperator(request.session);
      const waitingAnswer =
        sends.length === 0
          ? undefined
          : await app.services.readWithBody('planner', '/v1/steps/waiting', {
              sends: sends.map((s) => ({ campaignId: s.campaignId, candidateKey: s.candidateKey, step: s.step })),
            });
      const waiting: Array<Waiting | undefined> =
        waitingAnswer?.status === 200 ? (waitingAnswer.body as { waiting: Waiting[] }).waiting : [];
      const waitingText = (w: Waiting | undefined) =>
        w === undefined ? 'unknown' : `${w.followUps} follow-up(s), ${w.scheduled} other step(s) scheduled`;
      const content = html` <p>
          Each send was handed to the provider and its answer was lost. Look its Message-ID up in the provider's logs,
          then say what happened: <em>sent</em> (it went out) or <em>retry</em> (it did not: send it once). Delivery
          evidence and a lookup settle most before they reach this list (docs/operations.md, section 5).
        </p>
        <form method="get" action="/ambiguous">
          <label>Campaign id <input name="campaignId" value="${campaignId ?? ''}" maxlength="256" /></label
          ><button type="submit">Filter</button>
        </form>
        ${waitingAnswer && waitingAnswer.status !== 200 ? html`<div>What waits behind them: ${answerNotice(waitingAnswer)}</div>` : ''}
        ${sends.length === 0 ? html`<p data-testid="empty">No ambiguous send${campaignId ? ' in this campaign' : ''}.</p>` : ''}
        ${
          sends.length === 0
            ? ''
            : html`<table data-testid="ambiguous">
                <tr>
                  ${operator ? html`<th>pick</th>` : ''}
                  <th>send</th>
                  <th>campaign</th>
                  <th>candidate key</th>
                  <th>step</th>
                  <th>reason (the lookup's result, where one ran)</th>
                  <th>attempts</th>
                  <th>Message-ID</th>
                  <th>provider message id</th>
                  <th>late verdict awaited until</th>
                  <th>waiting behind it</th>
                  <th>claimed</th>
                  <th>updated</th>
                  ${operator ? html`<th>resolve</th>` : ''}
                </tr>
                ${sends.map(
                  (s, i) =>
                    html`<tr data-send="${s.sendId}">
                      ${operator ? html`<td><input type="checkbox" form="resolve-selection" name="s-${s.sendId}" value="1" aria-label="pick ${s.sendId}" /></td>` : ''}
                      <td>
                        <a href="/sends${query({ sendId: s.sendId })}"><code>${s.sendId}</code></a>
                      </td>
                      <td>${s.campaignId}</td>
                      <td>${s.candidateKey}</td>
                      <td>${s.step}</td>
                      <td data-field="reason">${s.reason}</td>
                      <td>${s.attempts}</td>
                      <td data-field="message-id"><code>${s.messageId ?? ''}</code></td>
                      <td><code>${s.providerMessageId}</code></td>
                      <td data-field="verdict-awaited">${s.verdictAwaitedUntil ?? 'no'}</td>
                      <td data-field="waiting">${waitingText(waiting[i])}</td>
                      <td>${s.claimedAt}</td>
                      <td>${s.updatedAt}</td>
                      ${
                        operator
                          ? html`<td>
                              <form method="post" action="/ambiguous/resolve">
                                ${csrfField(request.session)}<input type="hidden" name="sendId" value="${s.sendId}" />
                                <select name="resolution" aria-label="resolution">
                                  <option value="sent">sent: it went out</option>
                                  <option value="retry">retry: it did not</option>
                                </select>
                                <input
                                  name="reason"
                                  required
                                  maxlength="400"
                                  placeholder="reason (audit)"
                                  aria-label="reason"
                                />
                                <button type="submit">Resolve</button>
                              </form>
                            </td>`
                          : ''
                      }
                    </tr>`,
                )}
              </table>`
        }
        ${
          operator && sends.length > 0
            ? html`<form
                method="post"
                action="/ambiguous/resolve-selection"
                id="resolve-selection"
                data-testid="resolve-selection"
              >
                ${csrfField(request.session)}
                <label
                  >Resolve the picked sends as
                  <select name="resolution">
                    <option value="sent">sent: they went out</option>
                    <option value="retry">retry: they did not</option>
                  </select></label
                >
                <input
                  name="reason"
                  required
                  maxlength="400"
                  placeholder="reason (audit)"
                  aria-label="selection reason"
                />
                <button type="submit">Resolve the selection</button>
              </form>`
            : ''
        }
        ${next ? html`<p><a data-testid="next-page" href="/ambiguous${query({ campaignId, after: next })}">Next page</a></p>` : ''}`;
      return sendPage(reply, request, 'Ambiguous sends', content, '/ambiguous');
    },
  );

  /** Several sends at once, each through the sender's own resolve (each audited, each answer shown). */
  app.post<{ Body: Static<typeof ResolveManyBody> }>(
    '/ambiguous/resolve-selection',
    { config: { scope: 'public', console: 'action' }, schema: { body: ResolveManyBody } },
    async (request, reply) => {
      const { resolution, reason } = request.body;
      const keys = Object.keys(request.body).filter((k) => !['_csrf', 'resolution', 'reason'].includes(k));
      const sendIds = keys.flatMap((k) => PICK.exec(k)?.[1] ?? []);
      const limit = app.consoleConfig.CONSOLE_PAGE_SIZE;
      const refuse = (why: string) =>
        sendPage(reply, request, 'Resolve ambiguous sends', notice('refused', why), '/ambiguous', 400);
      if (sendIds.length !== keys.length) return refuse('Only picked sends (s-<send id>) may be posted.');
      if (sendIds.length === 0) return refuse('Pick at least one send.');
      if (sendIds.length > limit) return refuse(`At most ${limit} sends at once (a page).`);
      const results: Array<{ sendId: string; status: number; text: string }> = [];
      for (const sendId of sendIds) {
        const answer = await app.services.operate('sender', 'POST', `${path('/v1/sends', sendId)}/resolve`, {
          resolution,
        });
        const ok = answer.status === 200;
        const refused = answer.status >= 400 && answer.status < 500;
        await app.audit.record({
          actor: request.session.user as string,
          via: request.session.via as 'local' | 'proxy',
          action: `send.resolve.${resolution}`,
          target: sendId,
          reason,
          outcome: ok ? 'done' : refused ? 'refused' : 'failed',
          detail: ok ? `status ${(answer.body as SendView).status}` : `${answer.status}: ${answer.message}`,
        });
        results.push({
          sendId,
          status: answer.status,
          text: ok ? `now ${(answer.body as SendView).status}` : `${answer.status}: ${answer.message}`,
        });
      }
      const done = results.filter((r) => r.status === 200).length;
      const content = html`${notice(done === results.length ? 'ok' : 'refused', `${done} of ${results.length} resolved as ${resolution}.`)}
        <table data-testid="selection-results">
          <tr>
            <th>send</th>
            <th>answer</th>
          </tr>
          ${results.map(
            (r) =>
              html`<tr data-send="${r.sendId}">
                <td>
                  <a href="/sends${query({ sendId: r.sendId })}"><code>${r.sendId}</code></a>
                </td>
                <td data-field="answer">${r.text}</td>
              </tr>`,
          )}
        </table>
        <p><a href="/ambiguous">Back to the ambiguous sends</a></p>`;
      return sendPage(reply, request, 'Resolve ambiguous sends', content, '/ambiguous');
    },
  );

  app.post<{ Body: Static<typeof ResolveBody> }>(
    '/ambiguous/resolve',
    { config: { scope: 'public', console: 'action' }, schema: { body: ResolveBody } },
    async (request, reply) => {
      const { sendId, resolution, reason } = request.body;
      const answer = await app.services.operate('sender', 'POST', `${path('/v1/sends', sendId)}/resolve`, {
        resolution,
      });
      const ok = answer.status === 200;
      const refused = answer.status >= 400 && answer.status < 500;
      await app.audit.record({
        actor: request.session.user as string,
        via: request.session.via as 'local' | 'proxy',
        action: `send.resolve.${resolution}`,
        target: sendId,
        reason,
        outcome: ok ? 'done' : refused ? 'refused' : 'failed',
        detail: ok ? `status ${(answer.body as SendView).status}` : `${answer.status}: ${answer.message}`,
      });
      const content = html`${
          ok
            ? notice(
                'ok',
                html`Send <code>${sendId}</code> resolved as ${resolution}; it is now
                  ${(answer.body as SendView).status}.`,
              )
            : answerNotice(answer)
        }
        <p>
          <a href="/ambiguous">Back to the ambiguous sends</a> · <a href="/sends${query({ sendId })}">The send</a>
        </p>`;
      return sendPage(
        reply,
        request,
        'Resolve an ambiguous send',
        content,
        '/ambiguous',
        ok ? 200 : refused ? answer.status : 502,
      );
    },
  );
}
