import { ConfigError } from '@outreach/shared';
import { explainKafkaError } from '@outreach/shared';
import type { KafkaSecurity } from '@outreach/shared';

/**
 * How a Kafka command ends when the brokers refuse it: one line naming the cause (never a secret)
 * and the exit code runService uses: 78 for what retrying cannot fix (credentials, certificates,
 * ACLs, configuration), 69 for a broker that did not answer. Anything else is rethrown as it is.
 */
export function exitOnKafkaFailure(command: string, error: unknown, security?: KafkaSecurity): never {
  if (error instanceof ConfigError) {
    process.stderr.write(`${command}: ${error.message}\n`);
    process.exit(78);
  }
  const known = security ? explainKafkaError(error, security) : undefined;
  if (known) {
    process.stderr.write(`${command}: ${known.message}\n`);
    process.exit(known.failure === 'unreachable' ? 69 : 78);
  }
  const name = (error as { name?: unknown })?.name;
  if (typeof name === 'string' && name.startsWith('KafkaJS')) {
    process.stderr.write(`${command}: kafka: ${(error as Error).message}\n`);
    process.exit(69);
  }
  throw error;
}
