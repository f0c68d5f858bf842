import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';

const here = dirname(fileURLToPath(import.meta.url));
// htmx from its npm package, served by the console itself: no third-party origin in the CSP.
const htmxPath = join(dirname(createRequire(import.meta.url).resolve('htmx.org/package.json')), 'dist', 'htmx.min.js');
const cssPath = join(here, '..', '..', 'assets', 'console.css');

export default async function assetRoutes(app: FastifyInstance): Promise<void> {
  const htmx = readFileSync(htmxPath);
  const css = readFileSync(cssPath);
  const cache = 'public, max-age=3600';
  app.get('/assets/htmx.min.js', { config: { scope: 'public' } }, async (_request, reply) =>
    reply.type('text/javascript; charset=utf-8').header('cache-control', cache).send(htmx),
  );
  // Browsers ask for it on every site: an empty answer, not a 404 in every page's console.
  app.get('/favicon.ico', { config: { scope: 'public' } }, async (_request, reply) =>
    reply.code(204).header('cache-control', cache).send(),
  );
  app.get('/assets/console.css', { config: { scope: 'public' } }, async (_request, reply) =>
    reply.type('text/css; charset=utf-8').header('cache-control', cache).send(css),
  );
}
