/** What the database-only commands (seed, sweep) share: their config, their failures, their pool. */
import { ConfigError, createPool, loadConfig, topicName } from '@outreach/shared';
import type { Pool } from 'pg';
import { ConversationsRepository } from '../adapters/conversations-repository.js';
import { ConfigSchema, type Config } from '../config.js';
import { defaultGraces } from '../plugins/liveness.js';

export function fail(command: string, message: string, code = 2): never {
  process.stderr.write(`${command}: ${message}\n`);
  process.exit(code);
}

/**
 * The service's own config, so the commands see the graces, schema and topic prefix the service
 * does. They never reach Kafka: KAFKA_BROKERS is checked when set, and not required.
 */
export function commandConfig(command: string): Config {
  try {
    return loadConfig(ConfigSchema, { KAFKA_BROKERS: 'unused:9092', ...process.env });
  } catch (error) {
    if (error instanceof ConfigError) fail(command, error.message, 78); // EX_CONFIG, as the service
    throw error;
  }
}

/** A non-negative whole number from a flag, or the command stops naming the flag. */
export function count(command: string, flag: string, value: string | undefined, fallback?: number): number {
  if (value === undefined && fallback !== undefined) return fallback;
  const n = Number(value);
  if (value === undefined || !/^\d+$/.test(value) || !Number.isSafeInteger(n)) {
    fail(command, `--${flag} must be a whole number (got ${value === undefined ? 'nothing' : JSON.stringify(value)})`);
  }
  return n;
}

export function openRepository(command: string, config: Config): { pool: Pool; repository: ConversationsRepository } {
  const pool = createPool({
    connectionString: config.DATABASE_URL,
    applicationName: command,
    schema: config.DATABASE_SCHEMA,
    max: 2,
  });
  return {
    pool,
    repository: new ConversationsRepository(
      pool,
      {
        liveness: topicName('liveness', config.TOPIC_PREFIX),
        conversationEvents: topicName('conversationEvents', config.TOPIC_PREFIX),
      },
      defaultGraces(config),
    ),
  };
}
