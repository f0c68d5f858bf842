import type { BaseConfig } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';

/** The planner's own settings, on top of BaseConfigSchema (KAFKA_BROKERS, DATABASE_URL, HTTP_PORT, ...). */
export const ConfigSchema = Type.Object({
  DATABASE_SCHEMA: Type.String({ default: 'planner', pattern: '^[a-z_][a-z0-9_]*$' }),
});

export type Config = BaseConfig & Static<typeof ConfigSchema>;
