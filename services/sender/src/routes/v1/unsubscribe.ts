/**
 * The one-click unsubscribe every email advertises (List-Unsubscribe, RFC 8058), for anyone holding
 * the link: scope `public`. The token authenticates (workflow/unsubscribe.ts), and is checked before
 * the rate limit, whose buckets are the page's and the unsubscribe's apart, and within each a genuine
 * link's own apart from the client address's for everything else: link scanners' GETs and a flood of
 * made-up tokens never refuse a real one-click POST (plugins/feedback.ts).
 *
 * GET shows a confirmation page with a form and changes nothing: link scanners and previews fetch
 * every URL in a message. POST unsubscribes: a mail client's one-click `List-Unsubscribe=One-Click`
 * (application/x-www-form-urlencoded or multipart/form-data) and the page's form alike. The body
 * only says what the request is for, so it is read (bounded) and not interpreted.
 *
 * Nothing personal is shown: no address, no campaign, not whether the address was suppressed
 * already. A browser (Accept: text/html) gets pages; any other client JSON, errors as everywhere.
 */
import { AppError } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

// A token is about 100 characters (domain/unsubscribe-token.ts); the check refuses more than 200.
const TokenParams = Type.Object({ token: Type.String({ minLength: 1, maxLength: 256 }) });
type TokenRequest = FastifyRequest<{ Params: Static<typeof TokenParams> }>;

const MAX_FORM_BYTES = 16 * 1024;

const HTML_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  // The page posts only to itself, loads nothing, and cannot be framed (a framed button is a click
  // someone else chose); the token in its URL is sent nowhere.
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'x-robots-tag': 'noindex',
  'cache-control': 'no-store',
};

function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
  );
}

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${title}</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;line-height:1.5}button{font-size:1rem;padding:.5rem 1.25rem}</style></head>
<body><main><h1>${title}</h1>${body}</main></body>
</html>
`;
}

const wantsHtml = (request: FastifyRequest) => /\btext\/html\b/i.test(request.headers.accept ?? '');

export default async function unsubscribeRoutes(app: FastifyInstance): Promise<void> {
  // In this route file's scope only: every content type is read as bytes and dropped.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: MAX_FORM_BYTES }, (_request, _body, done) =>
    done(null, undefined),
  );

  const mailto = escapeHtml(app.unsubscribeMailto);
  const refusal = (kind: 'malformed' | 'not_found') =>
    kind === 'malformed'
      ? new AppError('BAD_REQUEST', 'this is not an unsubscribe link')
      : new AppError(
          'NOT_FOUND',
          'this unsubscribe link is not valid (it may be old); write to the unsubscribe address',
        );
  const refuse = (request: FastifyRequest, reply: FastifyReply, kind: 'malformed' | 'not_found') => {
    if (!wantsHtml(request)) throw refusal(kind);
    return reply
      .code(kind === 'malformed' ? 400 : 404)
      .headers(HTML_HEADERS)
      .send(
        page(
          'This link does not work',
          `<p>This unsubscribe link is not valid, perhaps because it is old.</p><p>To stop receiving our emails, write to <a href="mailto:${mailto}">${mailto}</a>.</p>`,
        ),
      );
  };

  /** The limit of `purpose` for this request's link: a genuine one's own bucket, else the client's. */
  const limited = async (
    request: TokenRequest,
    reply: FastifyReply,
    purpose: 'unsubscribePage' | 'unsubscribe',
  ): Promise<'malformed' | 'not_found' | undefined> => {
    const limit = app.publicRateLimit[purpose];
    const verdict = app.unsubscribes.verify(request.params.token);
    if (verdict.kind === 'genuine') {
      await limit.verified(request, reply, verdict.sendId);
      return undefined;
    }
    await limit.unverified(request, reply);
    return verdict.kind;
  };

  app.get(
    '/unsubscribe/:token',
    { config: { scope: 'public' }, schema: { params: TokenParams } },
    async (request: TokenRequest, reply) => {
      const forged = await limited(request, reply, 'unsubscribePage');
      if (forged) return refuse(request, reply, forged);
      const found = await app.unsubscribes.lookup(request.params.token);
      if (found.kind !== 'found') return refuse(request, reply, found.kind);
      if (!wantsHtml(request)) return { unsubscribed: false, confirm: 'POST to this URL to unsubscribe' };
      return reply
        .headers(HTML_HEADERS)
        .send(
          page(
            'Unsubscribe',
            '<p>Stop receiving these emails?</p><form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>',
          ),
        );
    },
  );

  app.post(
    '/unsubscribe/:token',
    {
      config: { scope: 'public' },
      schema: { params: TokenParams },
      bodyLimit: MAX_FORM_BYTES,
    },
    async (request: TokenRequest, reply) => {
      const forged = await limited(request, reply, 'unsubscribe');
      if (forged) return refuse(request, reply, forged);
      const result = await app.unsubscribes.unsubscribe(request.params.token, request.id);
      if (result.kind !== 'unsubscribed') return refuse(request, reply, result.kind);
      if (result.changed) app.feedback.intake.countSuppression('unsubscribe');
      if (!wantsHtml(request)) return { unsubscribed: true };
      return reply
        .headers(HTML_HEADERS)
        .send(page('You are unsubscribed', '<p>You will not receive further emails from us at this address.</p>'));
    },
  );
}
