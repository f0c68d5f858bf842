/**
 * Sessions as signed cookies (HMAC-SHA256 under SESSION_KEY), and the CSRF token each carries.
 *
 * A session is `base64url(JSON).base64url(mac)`: the server keeps nothing, so any replica verifies
 * it, and a change of one byte (a role raised from `reader` to `operator`) fails the MAC. It expires
 * on its own (`exp`, checked here, not left to the browser). A visitor who has not signed in gets
 * an anonymous session too, so the sign-in form has a CSRF token before anyone is known; signing in
 * issues a new session with a new token (no fixation).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const roles = ['reader', 'operator'] as const;
export type Role = (typeof roles)[number];

export interface Session {
  /** The signed-in user (an e-mail address from the proxy, a name from the users file); null: anonymous. */
  readonly user: string | null;
  readonly role: Role | null;
  /** `local` (the users file) or `proxy` (the OIDC proxy's headers); null while anonymous. */
  readonly via: 'local' | 'proxy' | null;
  /** The CSRF token every form of this session carries. */
  readonly csrf: string;
  /** Expiry, in ms since the epoch. */
  readonly exp: number;
}

const b64 = (data: Buffer | string) => Buffer.from(data).toString('base64url');

function mac(key: Buffer, payload: string): Buffer {
  return createHmac('sha256', key).update(`console-session\0${payload}`).digest();
}

export function newSession(
  who: { user: string; role: Role; via: 'local' | 'proxy' } | null,
  ttlMs: number,
  now = Date.now(),
): Session {
  return {
    user: who?.user ?? null,
    role: who?.role ?? null,
    via: who?.via ?? null,
    csrf: randomBytes(32).toString('base64url'),
    exp: now + ttlMs,
  };
}

export function signSession(session: Session, key: Buffer): string {
  const payload = b64(JSON.stringify(session));
  return `${payload}.${b64(mac(key, payload))}`;
}

/** The session a cookie holds, or undefined when it is malformed, forged (any of `keys`) or expired. */
export function verifySession(
  cookie: string | undefined,
  keys: readonly Buffer[],
  now = Date.now(),
): Session | undefined {
  if (cookie === undefined || cookie.length > 4096) return undefined;
  const [payload, given, ...rest] = cookie.split('.');
  if (payload === undefined || given === undefined || rest.length > 0) return undefined;
  const givenMac = Buffer.from(given, 'base64url');
  const valid = keys.some((key) => {
    const expected = mac(key, payload);
    return givenMac.length === expected.length && timingSafeEqual(givenMac, expected);
  });
  if (!valid) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
  if (!isSession(parsed) || parsed.exp <= now) return undefined;
  return parsed;
}

function isSession(value: unknown): value is Session {
  if (typeof value !== 'object' || value === null) return false;
  const s = value as Record<string, unknown>;
  const anonymous = s.user === null && s.role === null && s.via === null;
  const known =
    typeof s.user === 'string' &&
    (roles as readonly unknown[]).includes(s.role) &&
    (s.via === 'local' || s.via === 'proxy');
  return (anonymous || known) && typeof s.csrf === 'string' && s.csrf.length >= 32 && typeof s.exp === 'number';
}

/** Whether a form's token is the session's (constant time). */
export function csrfMatches(session: Session | undefined, given: unknown): boolean {
  if (session === undefined || typeof given !== 'string') return false;
  const a = Buffer.from(session.csrf);
  const b = Buffer.from(given);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Where to go after signing in: only a path on this origin. `//evil.example`, `/\evil.example`
 * (browsers read a backslash as a slash), `https://…`, `javascript:`, and anything with a control
 * character or whitespace become `/`.
 */
export function safeNext(next: unknown): string {
  if (typeof next !== 'string' || next.length === 0 || next.length > 2048) return '/';
  if (!next.startsWith('/') || next.startsWith('//') || next.includes('\\')) return '/';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0020\u007f-\u009f]/.test(next)) return '/';
  // Resolved against a placeholder origin, the path must stay on it.
  const resolved = new URL(next, 'http://console.invalid');
  if (resolved.origin !== 'http://console.invalid') return '/';
  // Resolving removes dot segments: `/.//evil.example` passes the checks above and resolves to the
  // protocol-relative `//evil.example`. What is returned is checked again.
  const path = `${resolved.pathname}${resolved.search}`;
  if (!path.startsWith('/') || path.startsWith('//') || path.includes('\\')) return '/';
  return path;
}
