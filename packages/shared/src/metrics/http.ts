import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { counter, histogram } from '../metrics.js';

/** The label of a request no route matched: its path would make one series per URL an attacker sends. */
export const UNMATCHED_ROUTE = 'unmatched';
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** The labels of one answered request; every value comes from a bounded set. */
export function httpLabels(
  request: Pick<FastifyRequest, 'method'> & { routeOptions: { url?: string | undefined } },
  reply: Pick<FastifyReply, 'statusCode'>,
): { route: string; method: string; status_class: string } {
  const status = reply.statusCode;
  return {
    // The route's template (`/v1/sends/:sendId`), never the URL.
    route: request.routeOptions.url ?? UNMATCHED_ROUTE,
    method: METHODS.has(request.method) ? request.method : 'OTHER',
    status_class: status >= 100 && status < 600 ? `${Math.floor(status / 100)}xx` : 'other',
  };
}

/**
 * Counts and times every answered request (health, metrics and docs included) by route template,
 * method and status class. Registered on the root instance before any route.
 */
export function registerHttpMetrics(app: FastifyInstance): void {
  const requests = counter(app.metrics, 'outreach_http_requests_total');
  const duration = histogram(app.metrics, 'outreach_http_request_duration_seconds');
  app.addHook('onResponse', async (request, reply) => {
    const labels = httpLabels(request, reply);
    requests.inc(labels);
    duration.observe(labels, reply.elapsedTime / 1000);
  });
}
