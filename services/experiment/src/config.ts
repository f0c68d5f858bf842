import { Type } from '@sinclair/typebox';

/** experiment's own settings, on top of BaseConfigSchema (KAFKA_BROKERS, DATABASE_URL, HTTP_PORT, ...). */
export const ConfigSchema = Type.Object({
  DATABASE_SCHEMA: Type.String({ default: 'experiment', pattern: '^[a-z_][a-z0-9_]*$' }),
});
