/**
 * One stage of the ceiling pipeline: the same Kafka and Postgres work as a service, with no business
 * logic. kafkajs consumes a chunk (500, as the services), one batched upsert stores it (keyed by the
 * record key, the candidate: a repeated request is absorbed, as the services absorb it), kafkajs
 * produces the inserted records to the next topic, and the offsets are committed.
 *
 *   KAFKA_BROKERS DATABASE_URL IN_TOPIC OUT_TOPIC TABLE GROUP node --import tsx ceiling-worker.ts
 */
import { createKafka } from '@outreach/shared';
import pg from 'pg';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};
const table = env('TABLE');
const kafka = createKafka({ brokers: env('KAFKA_BROKERS').split(','), clientId: 'ceiling' });
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 4 });
await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (id text PRIMARY KEY, value bytea NOT NULL)`);
const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
await producer.connect();
const consumer = kafka.consumer({ groupId: env('GROUP'), maxWaitTimeInMs: 100 });
await consumer.connect();
await consumer.subscribe({ topic: env('IN_TOPIC'), fromBeginning: true });
const CHUNK = 500;
await consumer.run({
  eachBatchAutoResolve: false,
  eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary }) => {
    for (let i = 0; i < batch.messages.length; i += CHUNK) {
      const chunk = batch.messages.slice(i, i + CHUNK);
      const ids = chunk.map((m) => m.key?.toString() ?? '');
      const { rows } = await pool.query<{ id: string }>(
        `INSERT INTO ${table} (id, value) SELECT * FROM unnest($1::text[], $2::bytea[]) ON CONFLICT DO NOTHING RETURNING id`,
        [ids, chunk.map((m) => m.value ?? Buffer.alloc(0))],
      );
      const inserted = new Set(rows.map((r) => r.id));
      const messages = chunk
        // delete() also drops a repeat of the same key within the chunk
        .filter((m) => inserted.delete(m.key?.toString() ?? ''))
        .map((m) => ({ key: m.key, value: m.value }));
      if (messages.length > 0) await producer.send({ topic: env('OUT_TOPIC'), acks: -1, messages });
      const last = chunk.at(-1);
      if (last) resolveOffset(last.offset);
      await commitOffsetsIfNecessary();
      await heartbeat();
    }
  },
});
const stop = async () => {
  await consumer.disconnect();
  await producer.disconnect();
  await pool.end();
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
process.stdout.write('ceiling stage running\n');
