import { runService } from '@outreach/shared';
import { buildApp, migrationsDir } from './app.js';
import { ConfigSchema } from './config.js';

await runService({
  name: 'planner',
  configSchema: ConfigSchema,
  migrations: { dir: migrationsDir, schema: (config) => config.DATABASE_SCHEMA, outbox: true },
  build: buildApp,
});
