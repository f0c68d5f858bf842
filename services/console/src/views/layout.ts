import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Session } from '../security/session.js';
import { html, type Html, type Interpolation } from '../domain/html.js';

const NAV = [
  ['/', 'Overview'],
  ['/campaigns', 'Campaigns'],
  ['/ambiguous', 'Ambiguous sends'],
  ['/sends', 'Send lookup'],
  ['/stalled', 'Stalled'],
  ['/dlq', 'Dead letters'],
  ['/experiments', 'Experiments'],
  ['/audit', 'Audit'],
] as const;

/** htmx's settings: no inline styles (the CSP refuses them), no eval, no script tags from fragments. */
const HTMX_CONFIG = JSON.stringify({
  includeIndicatorStyles: false,
  allowEval: false,
  allowScriptTags: false,
  selfRequestsOnly: true,
});

/** A whole page: the navigation, who is signed in and their sign-out form, and the content. */
export function page(title: string, session: Session | undefined, content: Interpolation, current = ''): Html {
  const signedIn = session?.user !== null && session?.user !== undefined;
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="htmx-config" content="${HTMX_CONFIG}" />
        <title>${title} · Outreach console</title>
        <link rel="stylesheet" href="/assets/console.css" />
        <script src="/assets/htmx.min.js" defer></script>
      </head>
      <body>
        <header>
          <strong>Outreach console</strong>
          ${
            signedIn
              ? html`<nav>
                    ${NAV.map(
                      ([href, label]) =>
                        html`<a href="${href}" ${href === current ? html` aria-current="page"` : ''}>${label}</a>`,
                    )}
                  </nav>
                  <form method="post" action="/logout" class="whoami">
                    <span data-testid="whoami">${session?.user} (${session?.role})</span>
                    <input type="hidden" name="_csrf" value="${session?.csrf}" /><button type="submit">Sign out</button>
                  </form>`
              : ''
          }
        </header>
        <main>
          <h1>${title}</h1>
          ${content}
        </main>
      </body>
    </html>`;
}

/** A notice: `ok`, `refused` (a 4xx with the service's reason) or `error`. */
export function notice(kind: 'ok' | 'refused' | 'error', text: Interpolation): Html {
  return html`<p class="notice ${kind}" role="status" data-testid="notice-${kind}">${text}</p>`;
}

export function csrfField(session: Session | undefined): Html {
  return html`<input type="hidden" name="_csrf" value="${session?.csrf ?? ''}" />`;
}

export function isOperator(session: Session | undefined): boolean {
  return session?.role === 'operator';
}

/** Replies with a whole page. */
export function sendPage(
  reply: FastifyReply,
  request: FastifyRequest,
  title: string,
  content: Interpolation,
  current = '',
  status = 200,
): FastifyReply {
  return reply
    .code(status)
    .type('text/html; charset=utf-8')
    .send(page(title, request.session, content, current).value);
}

/** A service's answer that is not a success, as a notice: its reason for a 4xx, unavailability otherwise. */
export function answerNotice(answer: { status: number; message: string }): Html {
  if (answer.status >= 400 && answer.status < 500) {
    return notice('refused', html`Refused (${answer.status}): ${answer.message}`);
  }
  return notice(
    'error',
    answer.status === 0 ? answer.message : html`The service failed (${answer.status}): ${answer.message}`,
  );
}
