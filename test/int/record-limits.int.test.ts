/**
 * Attacks on promise 3's byte bounds against the real broker: records whose size (value, key and
 * headers together) sits exactly at a topic's max.message.bytes, one byte over, and many records
 * that only fit when cut into several requests. A record we call fitting must be accepted; one we
 * refuse must really not fit (or we park what the broker would have taken).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  createKafka,
  createTopicsSettled,
  EventProducer,
  fitsAlone,
  recordBytes,
  type RawRecord,
} from '@outreach/shared';
import { uniqueName } from '@outreach/testkit';

const kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'attack-limits' });
const admin = kafka.admin();
let producer: EventProducer;
const LIMIT = 4_000;

beforeAll(async () => {
  await admin.connect();
  producer = new EventProducer(kafka);
});
afterAll(async () => {
  await producer.disconnect();
  await admin.disconnect();
});

async function limitedTopic(): Promise<string> {
  const topic = uniqueName('attack_limit');
  await createTopicsSettled(admin, [
    { topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: String(LIMIT) }] },
  ]);
  return topic;
}

/** A record of `total` bytes by our own count (batch overhead included), with a multi-byte key and headers. */
function recordOf(total: number): RawRecord {
  const key = 'ключ-'.repeat(10);
  const headers = { 'event-id': randomBytes(16).toString('hex'), 'x-ünïcode': 'värde'.repeat(20), multi: ['a', 'b'] };
  // The largest value whose record we count at `total` bytes or fewer (overhead included).
  const bare = recordBytes({ key, value: Buffer.alloc(0), headers });
  let size = total - bare;
  while (size > 0 && !fitsAlone({ key, value: Buffer.alloc(size), headers }, total)) size--;
  return { key, value: randomBytes(size), headers };
}

describe('records at the topic limit, against the broker', { timeout: 60_000 }, () => {
  it('a record exactly at the limit by our count: we say it fits, and the broker takes it', async () => {
    const topic = await limitedTopic();
    const record = recordOf(LIMIT);
    expect(fitsAlone(record, LIMIT)).toBe(true);
    await expect(producer.publishRaw([{ topic, records: [record] }])).resolves.toBeUndefined();
  });

  it('one byte over by our count: we say it does not fit', async () => {
    expect(fitsAlone(recordOf(LIMIT + 1), LIMIT)).toBe(false);
  });

  it('how conservative is the count: the largest value the broker takes alone is parked by us only within a small margin', async () => {
    const topic = await limitedTopic();
    // Find, with the real broker, the largest value that fits alone with this key and headers.
    const base = recordOf(LIMIT);
    let lo = base.value?.length ?? 0;
    let hi = lo + 200;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      const ok = await producer
        .publishRaw([{ topic, records: [{ ...base, value: randomBytes(mid) }] }])
        .then(() => true)
        .catch(() => false);
      if (ok) lo = mid;
      else hi = mid - 1;
    }
    const margin = lo - (base.value?.length ?? 0);
    // Every record within `margin` bytes above our limit is parked though the broker would take it.
    expect(margin).toBeGreaterThanOrEqual(0);
    expect(margin).toBeLessThan(64);
  });

  it('sixty records of ~900 bytes to a 4000-byte topic: cut into requests the broker accepts', async () => {
    const topic = await limitedTopic();
    const records = Array.from({ length: 60 }, () => recordOf(900));
    await expect(producer.publishRaw([{ topic, records }])).resolves.toBeUndefined();
  });
});
