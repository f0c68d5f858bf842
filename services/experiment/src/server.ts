import { runService } from '@outreach/shared';
import { buildApp } from './app.js';
import { ConfigSchema } from './config.js';

await runService({ name: 'experiment', configSchema: ConfigSchema, build: buildApp });
