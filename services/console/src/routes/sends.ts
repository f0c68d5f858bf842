import { holdsAtSign } from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { html, path, query, type Html } from '../domain/html.js';
import type { Session } from '../security/session.js';
import { answerNotice, csrfField, notice, sendPage } from '../views/layout.js';
import type { SendView } from './ambiguous.js';

const LookupQuery = Type.Object({
  sendId: Type.Optional(Type.String({ maxLength: 64 })),
  requestId: Type.Optional(Type.String({ maxLength: 256 })),
  campaignId: Type.Optional(Type.String({ maxLength: 256 })),
  candidateId: Type.Optional(Type.String({ maxLength: 256 })),
  step: Type.Optional(Type.String({ maxLength: 256 })),
});
/** An address is looked up from a POST body only: it never reaches a URL, a log line or the history. */
const AddressBody = Type.Object({
  _csrf: Type.String({ maxLength: 128 }),
  campaignId: Type.String({ maxLength: 256 }),
  step: Type.Optional(Type.String({ maxLength: 256 })),
  email: Type.String({ maxLength: 320 }),
});

const FIELDS: ReadonlyArray<keyof SendView> = [
  'sendId',
  'status',
  'reason',
  'campaignId',
  'candidateKey',
  'step',
  'experimentId',
  'variant',
  'attempts',
  'providerMessageId',
  'source',
  'claimedAt',
  'sentAt',
  'updatedAt',
  'emailHash',
];

interface RequestStatus {
  readonly requestId: string;
  readonly status: string;
  readonly rejection: { reason: string; detail: string; sendId: string | null } | null;
  readonly updatedAt: string;
  readonly sends: ReadonlyArray<{ sendId: string; step: string; status: string; at: string | null }>;
}

interface CheckAnswer {
  readonly sendId: string;
  readonly alreadySent: boolean;
  readonly claimed: boolean;
  readonly existing: Partial<Record<keyof SendView, unknown>> | null;
}

function sendTable(send: Partial<Record<keyof SendView, unknown>>, testId = 'send'): Html {
  return html`<table data-testid="${testId}">
    ${FIELDS.filter((f) => send[f] !== undefined).map(
      (f) =>
        html`<tr>
          <th>${f}</th>
          <td data-field="${f}">${send[f] === null ? '' : String(send[f])}</td>
        </tr>`,
    )}
  </table>`;
}

function requestResult(view: RequestStatus): Html {
  return html`<table data-testid="request">
      <tr>
        <th>requestId</th>
        <td data-field="requestId">${view.requestId}</td>
      </tr>
      <tr>
        <th>status</th>
        <td data-field="status">${view.status}</td>
      </tr>
      ${
        view.rejection
          ? html`<tr>
                <th>rejection</th>
                <td data-field="rejection">${view.rejection.reason}</td>
              </tr>
              <tr>
                <th>why</th>
                <td data-field="rejection-detail">${view.rejection.detail}</td>
              </tr>
              ${
                view.rejection.sendId
                  ? html`<tr>
                      <th>holding send</th>
                      <td>
                        <a href="${`/sends${query({ sendId: view.rejection.sendId })}`}">${view.rejection.sendId}</a>
                      </td>
                    </tr>`
                  : ''
              }`
          : ''
      }
      <tr>
        <th>updatedAt</th>
        <td>${view.updatedAt}</td>
      </tr>
    </table>
    ${
      view.sends.length > 0
        ? html`<table data-testid="request-sends">
            <tr>
              <th>step</th>
              <th>status</th>
              <th>at</th>
              <th>send</th>
            </tr>
            ${view.sends.map(
              (s) =>
                html`<tr data-send="${s.sendId}">
                  <td>${s.step}</td>
                  <td data-field="status">${s.status}</td>
                  <td>${s.at ?? ''}</td>
                  <td><a href="${`/sends${query({ sendId: s.sendId })}`}">${s.sendId}</a></td>
                </tr>`,
            )}
          </table>`
        : ''
    }`;
}

/**
 * The sender's check. By candidate, `sendId` is the id of that candidate's send at the step; by
 * address, the existing send (if any) may be another candidate's, so only its own id is shown.
 */
function checkResult(check: CheckAnswer, byAddress = false): Html {
  return html`<table data-testid="check">
      ${
        byAddress
          ? ''
          : html`<tr>
              <th>sendId</th>
              <td data-field="sendId"><a href="${`/sends${query({ sendId: check.sendId })}`}">${check.sendId}</a></td>
            </tr>`
      }
      <tr>
        <th>claimed</th>
        <td data-field="claimed">${check.claimed ? 'yes' : 'no'}</td>
      </tr>
      <tr>
        <th>already sent</th>
        <td data-field="alreadySent">${check.alreadySent ? 'yes' : 'no'}</td>
      </tr>
    </table>
    ${check.existing ? sendTable(check.existing, 'existing') : html`<p>No send is claimed for it.</p>`}`;
}

/** 4xx answers keep their status; anything else is the console's 502. */
const statusOf = (answer: { status: number }) => (answer.status >= 400 && answer.status < 500 ? answer.status : 502);

export default async function sendRoutes(app: FastifyInstance): Promise<void> {
  const form = (session: Session, values: Static<typeof LookupQuery>) =>
    html`<section>
        <h2>By send id</h2>
        <form method="get" action="/sends" hx-get="/sends" hx-target="#lookup-result" hx-push-url="true">
          <label
            >Send id <input name="sendId" value="${values.sendId ?? ''}" maxlength="64" placeholder="a UUID" required
          /></label>
          <button type="submit">Look up</button>
        </form>
      </section>
      <section>
        <h2>By request id</h2>
        <p>The planner's status of an outreach request, with the reason it was rejected.</p>
        <form method="get" action="/sends" data-testid="by-request">
          <label
            >Request id <input name="requestId" value="${values.requestId ?? ''}" maxlength="256" required
          /></label>
          <button type="submit">Look up</button>
        </form>
      </section>
      <section>
        <h2>By candidate</h2>
        <p>The send of a campaign's candidate at a step (an address goes in the form below, never in a link).</p>
        <form method="get" action="/sends" data-testid="by-candidate">
          <label
            >Campaign <input name="campaignId" value="${values.campaignId ?? ''}" maxlength="256" required
          /></label>
          <label
            >Candidate id <input name="candidateId" value="${values.candidateId ?? ''}" maxlength="256" required
          /></label>
          <label>Step <input name="step" value="${values.step ?? 'intro'}" maxlength="256" required /></label>
          <button type="submit">Look up</button>
        </form>
      </section>
      <section>
        <h2>By address</h2>
        <p>
          Whether an address was sent (or claimed) at a campaign's step. The address travels in this form's body only:
          not in the page's address, the browser's history or any log.
        </p>
        <form method="post" action="/sends/by-address" data-testid="by-address">
          ${csrfField(session)}
          <label>Campaign <input name="campaignId" maxlength="256" required /></label>
          <label>Step <input name="step" value="intro" maxlength="256" required /></label>
          <label>Address <input name="email" type="email" maxlength="320" autocomplete="off" required /></label>
          <button type="submit">Look up</button>
        </form>
      </section>`;

  /**
   * A send by its id (htmx swaps the result in place; a plain GET without it), a request's status by
   * its id, or the send of a (campaign, candidate, step).
   */
  app.get<{ Querystring: Static<typeof LookupQuery> }>(
    '/sends',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: LookupQuery } },
    async (request, reply) => {
      const sendId = request.query.sendId?.trim() ?? '';
      const requestId = request.query.requestId?.trim() ?? '';
      const campaignId = request.query.campaignId?.trim() ?? '';
      const candidateId = request.query.candidateId?.trim() ?? '';
      const step = request.query.step?.trim() || 'intro';
      // An address in a link would sit in the history and the logs, however its at-sign is spelt
      // (full-width, small, percent-encoded, behind invisible characters): no id holds one, so a
      // value that does is refused, asked of no service and not echoed into the form.
      const withAddress = Object.entries(request.query).filter(([, v]) => typeof v === 'string' && holdsAtSign(v));
      let result = html``;
      let status = 200;
      let echoed: Static<typeof LookupQuery> = { ...request.query, step };
      if (withAddress.length > 0) {
        const named = withAddress.map(([k]) => k);
        result = notice('refused', `That ${named.join(' and ')} holds an address: look it up with the address form.`);
        status = 400;
        echoed = Object.fromEntries(Object.entries(echoed).filter(([k]) => !named.includes(k)));
      } else if (sendId !== '') {
        const answer = await app.services.read('sender', path('/v1/sends', sendId));
        if (answer.status === 200) result = sendTable(answer.body as Partial<Record<keyof SendView, unknown>>);
        else [result, status] = [answerNotice(answer), statusOf(answer)];
      } else if (requestId !== '') {
        const answer = await app.services.read('planner', path('/v1/outreach-requests', requestId));
        if (answer.status === 200) result = requestResult(answer.body as RequestStatus);
        else [result, status] = [answerNotice(answer), statusOf(answer)];
      } else if (candidateId !== '' || campaignId !== '') {
        if (candidateId === '' || campaignId === '') {
          result = notice('refused', 'A candidate lookup needs the campaign and the candidate id.');
          status = 400;
        } else {
          const answer = await app.services.read(
            'sender',
            `/v1/sends/check${query({ campaignId, candidateId, step })}`,
          );
          if (answer.status === 200) result = checkResult(answer.body as CheckAnswer);
          else [result, status] = [answerNotice(answer), statusOf(answer)];
        }
      }
      const fragment = request.headers['hx-request'] === 'true' && request.headers['hx-target'] === 'lookup-result';
      if (fragment) return reply.code(status).type('text/html; charset=utf-8').send(result.value);
      const content = html`<div id="lookup-result">${result}</div>
        ${form(request.session, echoed)}`;
      return sendPage(reply, request, 'Send lookup', content, '/sends', status);
    },
  );

  /**
   * Whether an address was sent or claimed at a campaign's step (the sender's check, with the
   * console's `read` token). The address is neither logged nor audited nor echoed back.
   */
  app.post<{ Body: Static<typeof AddressBody> }>(
    '/sends/by-address',
    { config: { scope: 'public', console: 'page' }, schema: { body: AddressBody } },
    async (request, reply) => {
      const campaignId = request.body.campaignId.trim();
      const step = request.body.step?.trim() || 'intro';
      const email = request.body.email.trim();
      let result: Html;
      let status = 200;
      if (campaignId === '' || !/^[^\s@]+@[^\s@]+$/.test(email)) {
        result = notice('refused', 'An address lookup needs the campaign and an address.');
        status = 400;
      } else {
        // The address as the candidate too: a candidate id that is an address is keyed by its hash.
        const answer = await app.services.read(
          'sender',
          `/v1/sends/check${query({ campaignId, candidateId: email, step, email })}`,
        );
        if (answer.status === 200) result = checkResult(answer.body as CheckAnswer, true);
        else [result, status] = [answerNotice(answer), statusOf(answer)];
      }
      const content = html`<div id="lookup-result">${result}</div>
        ${form(request.session, { campaignId, step })}`;
      return sendPage(reply, request, 'Send lookup', content, '/sends', status);
    },
  );
}
