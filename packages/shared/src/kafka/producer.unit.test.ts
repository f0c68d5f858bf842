import { describe, expect, it } from 'vitest';
import {
  childTraceparent,
  randomHex,
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

describe('childTraceparent', () => {
  const shape = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

  it('continues the parent trace with a new span id, and keeps its flags', () => {
    const parent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00';
    const child = childTraceparent(parent);
    const [, traceId, spanId, flags] = shape.exec(child) ?? [];
    expect(traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(spanId).not.toBe('b7ad6b7169203331');
    expect(flags).toBe('00');
  });

  it('starts a sampled trace without a parent, or with one that is malformed or all zeros', () => {
    for (const parent of [undefined, 'garbage', `00-${'0'.repeat(32)}-b7ad6b7169203331-01`]) {
      const [, traceId, , flags] = shape.exec(childTraceparent(parent)) ?? [];
      expect(traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(traceId).not.toBe('0'.repeat(32));
      expect(flags).toBe('01');
    }
  });

  it('draws distinct ids across many refills of the random pool', () => {
    const spans = new Set<string>();
    const traces = new Set<string>();
    for (let i = 0; i < 5_000; i++) {
      const [, traceId, spanId] = shape.exec(childTraceparent()) ?? [];
      traces.add(traceId as string);
      spans.add(spanId as string);
    }
    // 5,000 trace ids of 16 bytes and span ids of 8 bytes: 120 KB drawn, about 30 refills of the pool.
    expect(traces.size).toBe(5_000);
    expect(spans.size).toBe(5_000);
    expect(randomHex(3000)).toMatch(/^[0-9a-f]{6000}$/);
  });
});
