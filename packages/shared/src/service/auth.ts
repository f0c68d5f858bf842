import { timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { AppError } from './errors.js';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

function matches(presented: string, tokens: readonly Buffer[]): boolean {
  const candidate = Buffer.from(presented);
  // Compare against every token, always, so timing reveals neither which nor whether one matched.
  let ok = false;
  for (const token of tokens) {
    if (token.length === candidate.length && timingSafeEqual(token, candidate)) ok = true;
  }
  return ok;
}

/**
 * Mutating `/v1` routes need `Authorization: Bearer <token>` with a token from API_TOKENS.
 * With no tokens configured they are refused: an open write API is never the default.
 */
export function bearerAuth(apiTokens: readonly string[]): (request: FastifyRequest) => Promise<void> {
  const tokens = apiTokens.filter((t) => t.length > 0).map((t) => Buffer.from(t));
  return async (request) => {
    if (SAFE_METHODS.has(request.method) || !request.url.startsWith('/v1/')) return;
    if (tokens.length === 0) throw new AppError('UNAUTHORIZED', 'no API tokens are configured (set API_TOKENS)');
    const header = request.headers.authorization ?? '';
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match?.[1]) throw new AppError('UNAUTHORIZED', 'missing bearer token (Authorization: Bearer <token>)');
    if (!matches(match[1], tokens)) throw new AppError('UNAUTHORIZED', 'invalid bearer token');
  };
}
