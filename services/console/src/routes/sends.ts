import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { html, path } from '../domain/html.js';
import { answerNotice, sendPage } from '../views/layout.js';
import type { SendView } from './ambiguous.js';

const LookupQuery = Type.Object({ sendId: Type.Optional(Type.String({ maxLength: 64 })) });

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

export default async function sendRoutes(app: FastifyInstance): Promise<void> {
  /** A send by its id; with htmx, the form swaps the result in place (and works as a plain GET without it). */
  app.get<{ Querystring: Static<typeof LookupQuery> }>(
    '/sends',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: LookupQuery } },
    async (request, reply) => {
      const sendId = request.query.sendId?.trim() ?? '';
      let result = html``;
      let status = 200;
      if (sendId !== '') {
        const answer = await app.services.read('sender', path('/v1/sends', sendId));
        if (answer.status === 200) {
          const send = answer.body as Partial<Record<keyof SendView, unknown>>;
          result = html`<table data-testid="send">
            ${FIELDS.filter((f) => send[f] !== undefined).map(
              (f) =>
                html`<tr>
                  <th>${f}</th>
                  <td data-field="${f}">${send[f] === null ? '' : String(send[f])}</td>
                </tr>`,
            )}
          </table>`;
        } else {
          result = answerNotice(answer);
          status = answer.status === 404 || answer.status === 400 ? answer.status : 502;
        }
      }
      const fragment = request.headers['hx-request'] === 'true' && request.headers['hx-target'] === 'lookup-result';
      if (fragment) return reply.code(status).type('text/html; charset=utf-8').send(result.value);
      const content = html`<form
          method="get"
          action="/sends"
          hx-get="/sends"
          hx-target="#lookup-result"
          hx-push-url="true"
        >
          <label>Send id <input name="sendId" value="${sendId}" maxlength="64" placeholder="a UUID" required /></label>
          <button type="submit">Look up</button>
        </form>
        <div id="lookup-result">${result}</div>`;
      return sendPage(reply, request, 'Send lookup', content, '/sends', status);
    },
  );
}
