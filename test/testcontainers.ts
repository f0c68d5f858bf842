/**
 * The Docker path: the same Kafka and PostgreSQL, as containers. Untested on the machines this
 * project is developed on (they have no Docker engine); see docs/adr/002-local-infrastructure.md.
 */
import { KafkaContainer } from '@testcontainers/kafka';
import { PostgreSqlContainer } from '@testcontainers/postgresql';

export async function startContainers(): Promise<{
  kafkaBrokers: string;
  databaseUrl: string;
  stop: () => Promise<void>;
}> {
  const [kafka, postgres] = await Promise.all([
    // The testcontainers Kafka module drives Confluent's images; cp-kafka 8.x is Apache Kafka 4.x in KRaft mode.
    new KafkaContainer('confluentinc/cp-kafka:8.1.0').start(),
    new PostgreSqlContainer('postgres:16-alpine').withDatabase('test').start(),
  ]);
  return {
    kafkaBrokers: `${kafka.getHost()}:${kafka.getMappedPort(9093)}`,
    databaseUrl: postgres.getConnectionUri(),
    stop: async () => {
      await Promise.all([kafka.stop(), postgres.stop()]);
    },
  };
}
