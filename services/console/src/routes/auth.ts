import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { html } from '../domain/html.js';
import { newSession, safeNext } from '../security/session.js';
import { verifyLogin } from '../security/users.js';
import { csrfField, notice, page } from '../views/layout.js';

const LoginQuery = Type.Object({ next: Type.Optional(Type.String({ maxLength: 2048 })) });
const LoginBody = Type.Object({
  _csrf: Type.String({ maxLength: 128 }),
  username: Type.String({ maxLength: 128 }),
  password: Type.String({ maxLength: 1024 }),
  next: Type.Optional(Type.String({ maxLength: 2048 })),
});

function loginForm(request: { session: Parameters<typeof csrfField>[0] }, next: string, problem?: string) {
  return html`${problem ? notice('error', problem) : ''}
    <form method="post" action="/login">
      ${csrfField(request.session)}
      <input type="hidden" name="next" value="${next}" />
      <label>User <input name="username" autocomplete="username" required /></label>
      <label>Password <input name="password" type="password" autocomplete="current-password" required /></label>
      <button type="submit">Sign in</button>
    </form>
    <p>Behind the organisation's sign-in proxy, you are signed in without this form.</p>`;
}

/** Sign-in with a local user (the users file), and sign-out. */
export default async function authRoutes(app: FastifyInstance): Promise<void> {
  app.get<{ Querystring: Static<typeof LoginQuery> }>(
    '/login',
    { config: { scope: 'public', console: 'open' }, schema: { querystring: LoginQuery } },
    async (request, reply) => {
      const next = safeNext(request.query.next);
      if (request.session.user !== null) return reply.redirect(next, 303);
      return reply
        .type('text/html; charset=utf-8')
        .send(page('Sign in', request.session, loginForm(request, next)).value);
    },
  );

  app.post<{ Body: Static<typeof LoginBody> }>(
    '/login',
    { config: { scope: 'public', console: 'open' }, schema: { body: LoginBody } },
    async (request, reply) => {
      const next = safeNext(request.body.next);
      const { username, password } = request.body;
      const tooMany = (retryAfterS: number, why: string) =>
        reply
          .code(429)
          .header('retry-after', String(retryAfterS))
          .type('text/html; charset=utf-8')
          .send(page('Sign in', request.session, loginForm(request, next, `Try again later: ${why}.`)).value);
      const admitted = app.loginLimiter.admit(request.ip, username);
      if (!admitted.ok) {
        request.log.warn({ reason: admitted.why }, 'console sign-in throttled');
        return tooMany(admitted.retryAfterS, admitted.why);
      }
      const checked = await app.loginLimiter.check(request.ip, () => verifyLogin(app.localUsers(), username, password));
      if ('refused' in checked) {
        request.log.warn({ reason: checked.refused }, 'console sign-in refused before its password check');
        return tooMany(1, checked.refused);
      }
      const user = checked.value;
      if (!user) {
        app.loginLimiter.failed(request.ip, username);
        request.log.warn('console sign-in refused');
        return reply
          .code(401)
          .type('text/html; charset=utf-8')
          .send(page('Sign in', request.session, loginForm(request, next, 'Unknown user or wrong password.')).value);
      }
      app.loginLimiter.succeeded(request.ip, username);
      // A new session, and with it a new CSRF token: nothing from before sign-in carries over.
      app.setSession(
        reply,
        newSession({ user: user.name, role: user.role, via: 'local' }, app.consoleConfig.CONSOLE_SESSION_TTL_MS),
      );
      request.log.info({ role: user.role }, 'console sign-in');
      return reply.redirect(next, 303);
    },
  );

  app.post('/logout', { config: { scope: 'public', console: 'page' } }, async (_request, reply) => {
    app.setSession(reply, newSession(null, app.consoleConfig.CONSOLE_SESSION_TTL_MS));
    return reply.redirect('/login', 303);
  });
}
