// Tracing first: its instrumentations patch pg, fastify and http as they load, so everything else is
// imported after it, dynamically (packages/shared/src/telemetry/start.ts; off unless OTEL_* says so).
import { startTelemetry } from '@outreach/shared/telemetry';

await startTelemetry('planner');
const { runService } = await import('@outreach/shared');
const { buildApp, migrationsDir } = await import('./app.js');
const { ConfigSchema } = await import('./config.js');

await runService({
  name: 'planner',
  configSchema: ConfigSchema,
  migrations: { dir: migrationsDir, schema: (config) => config.DATABASE_SCHEMA, outbox: true },
  build: buildApp,
});
