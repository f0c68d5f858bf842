import { describe, expect, it } from 'vitest';
import { GroupCommit } from './group-commit.js';

describe('GroupCommit', () => {
  it('flushes a lone item at once and returns its own result', async () => {
    const flushes: number[][] = [];
    const group = new GroupCommit<number, number>(async (items) => {
      flushes.push([...items]);
      return items.map((n) => n * 2);
    });
    expect(await group.submit(21)).toBe(42);
    expect(flushes).toEqual([[21]]);
  });

  it('collects what arrives while a flush is in flight into the next flush, in order', async () => {
    const flushes: number[][] = [];
    let release: () => void = () => undefined;
    const group = new GroupCommit<number, string>(async (items) => {
      flushes.push([...items]);
      if (flushes.length === 1) await new Promise<void>((resolve) => (release = resolve));
      return items.map((n) => `r${n}`);
    });
    const first = group.submit(1);
    await new Promise((resolve) => setImmediate(resolve));
    const rest = [2, 3, 4].map((n) => group.submit(n));
    release();
    expect(await Promise.all([first, ...rest])).toEqual(['r1', 'r2', 'r3', 'r4']);
    expect(flushes).toEqual([[1], [2, 3, 4]]);
  });

  it('splits at maxItems and rejects every item of a failed flush, and only those', async () => {
    const group = new GroupCommit<number, number>(async (items) => {
      if (items.includes(3)) throw new Error('boom');
      return [...items];
    }, 2);
    const results = await Promise.allSettled([1, 2, 3, 4, 5].map((n) => group.submit(n)));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'rejected', 'fulfilled']);
  });

  it('rejects all when the flush returns the wrong number of results', async () => {
    const group = new GroupCommit<number, number>(async () => [1]);
    const results = await Promise.allSettled([group.submit(1), group.submit(2)]);
    expect(results.every((r) => r.status === 'rejected')).toBe(true);
  });
});
