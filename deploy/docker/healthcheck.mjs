/** `node healthcheck.mjs [path]`: exit 0 when the service in this container answers 2xx (compose healthchecks). */
const path = process.argv[2] ?? '/health/ready';
const port = process.env.HTTP_PORT ?? '8080';
fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(3_000) }).then(
  (response) => process.exit(response.ok ? 0 : 1),
  () => process.exit(1),
);
