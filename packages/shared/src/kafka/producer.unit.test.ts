import { describe, expect, it } from 'vitest';
import {
  fitsAlone,
  isMessageTooLarge,
  planRequests,
  RECORD_BATCH_OVERHEAD,
  recordBytes,
  RecordTooLargeError,
  type RawRecord,
} from './producer.js';

const record = (valueBytes: number, key = 'k'): RawRecord => ({
  key,
  value: Buffer.alloc(valueBytes),
  headers: { 'event-id': '00000000-0000-4000-8000-000000000000' },
});
const MiB = 1_048_576;

describe('request planning by bytes', () => {
  it('bounds a record from above: key, value, headers and every varint at its widest', () => {
    const r = record(100_000);
    expect(recordBytes(r)).toBeGreaterThanOrEqual(100_000 + 1 + 'event-id'.length + 36);
    expect(recordBytes(r)).toBeLessThan(100_000 + 200);
    expect(recordBytes({ key: null, value: null, headers: {} })).toBeGreaterThan(0);
  });

  it('cuts 100 KB records into requests under 1 MiB per topic, in order, nothing lost', () => {
    const records = Array.from({ length: 95 }, (_, i) => record(100_000, `k${i}`));
    const requests = planRequests([{ topic: 't', records }], () => MiB);
    expect(requests.length).toBe(10);
    for (const request of requests) {
      const bytes = RECORD_BATCH_OVERHEAD + request.flatMap((b) => b.records).reduce((n, r) => n + recordBytes(r), 0);
      expect(bytes).toBeLessThanOrEqual(MiB);
    }
    expect(requests.flatMap((r) => r.flatMap((b) => b.records))).toEqual(records);
  });

  it('budgets each topic on its own limit, and keeps each topic in order', () => {
    const a = Array.from({ length: 6 }, (_, i) => record(300_000, `a${i}`));
    const b = Array.from({ length: 6 }, (_, i) => record(300_000, `b${i}`));
    const requests = planRequests(
      [
        { topic: 'a', records: a.slice(0, 3) },
        { topic: 'b', records: b },
        { topic: 'a', records: a.slice(3) },
      ],
      (topic) => (topic === 'a' ? MiB : 2 * MiB),
    );
    const of = (topic: string) => requests.flatMap((r) => r.filter((x) => x.topic === topic).flatMap((x) => x.records));
    expect(of('a')).toEqual(a);
    expect(of('b')).toEqual(b);
    for (const request of requests) {
      for (const { topic, records } of request) {
        const limit = topic === 'a' ? MiB : 2 * MiB;
        expect(RECORD_BATCH_OVERHEAD + records.reduce((n, r) => n + recordBytes(r), 0)).toBeLessThanOrEqual(limit);
      }
    }
  });

  it('refuses, before anything is sent, a record that cannot fit alone', () => {
    const big = record(1_200_000);
    expect(fitsAlone(big, MiB)).toBe(false);
    expect(fitsAlone(record(MiB - 200), MiB)).toBe(true);
    expect(() => planRequests([{ topic: 't', records: [record(10), big] }], () => MiB)).toThrow(RecordTooLargeError);
    expect(isMessageTooLarge(new RecordTooLargeError('t', 2, 1))).toBe(true);
    expect(isMessageTooLarge(Object.assign(new Error('broker'), { type: 'MESSAGE_TOO_LARGE' }))).toBe(true);
    expect(isMessageTooLarge(new Error('other', { cause: { type: 'MESSAGE_TOO_LARGE' } }))).toBe(true);
    expect(isMessageTooLarge(new Error('other'))).toBe(false);
  });
});
