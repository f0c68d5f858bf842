import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { html, query } from '../domain/html.js';
import { sendPage } from '../views/layout.js';

const AuditQuery = Type.Object({ before: Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,17}$' })) });

export default async function auditRoutes(app: FastifyInstance): Promise<void> {
  app.get<{ Querystring: Static<typeof AuditQuery> }>(
    '/audit',
    { config: { scope: 'public', console: 'page' }, schema: { querystring: AuditQuery } },
    async (request, reply) => {
      const { rows, next } = await app.audit.page(request.query.before ?? null, app.consoleConfig.CONSOLE_PAGE_SIZE);
      const content = html`<p>Every action taken through the console: who, when, why, and what the service answered.</p>
        ${
          rows.length === 0
            ? html`<p>No action yet.</p>`
            : html`<table data-testid="audit">
                <tr>
                  <th>when</th>
                  <th>who</th>
                  <th>action</th>
                  <th>target</th>
                  <th>reason</th>
                  <th>outcome</th>
                  <th>detail</th>
                </tr>
                ${rows.map(
                  (r) =>
                    html`<tr>
                      <td>${r.at.toISOString()}</td>
                      <td>${r.actor} (${r.via})</td>
                      <td>${r.action}</td>
                      <td>${r.target}</td>
                      <td>${r.reason}</td>
                      <td>${r.outcome}</td>
                      <td>${r.detail}</td>
                    </tr>`,
                )}
              </table>`
        }
        ${next ? html`<p><a data-testid="next-page" href="/audit${query({ before: next })}">Older</a></p>` : ''}`;
      return sendPage(reply, request, 'Audit', content, '/audit');
    },
  );
}
