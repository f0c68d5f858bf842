import { afterEach, describe, expect, it, vi } from 'vitest';
import { reloadEvery } from './reload.js';

afterEach(() => vi.useRealTimers());

describe('reloadEvery', () => {
  it('hands out a new value only once onChange accepted it; a failed read or onChange keeps the old one', () => {
    vi.useFakeTimers();
    let source: () => string = () => 'a';
    const changes: string[] = [];
    const errors: string[] = [];
    let refuse = false;
    const value = reloadEvery('a', () => source(), {
      intervalMs: 1_000,
      onChange: (next) => {
        if (refuse) throw new Error('cannot use it');
        changes.push(next);
      },
      onError: (error) => errors.push((error as Error).message),
    });
    vi.advanceTimersByTime(5_000);
    expect(changes).toEqual([]);

    source = () => {
      throw new Error('gone');
    };
    vi.advanceTimersByTime(1_000);
    expect(value.current()).toBe('a');
    expect(errors).toEqual(['gone']);

    source = () => 'b';
    refuse = true;
    vi.advanceTimersByTime(1_000);
    expect(value.current()).toBe('a');
    expect(errors).toEqual(['gone', 'cannot use it']);

    refuse = false;
    vi.advanceTimersByTime(1_000);
    expect(value.current()).toBe('b');
    expect(changes).toEqual(['b']);

    value.stop();
    source = () => 'c';
    vi.advanceTimersByTime(10_000);
    expect(value.current()).toBe('b');
  });

  it('compares with `same` when given', () => {
    vi.useFakeTimers();
    const changes: string[][] = [];
    const value = reloadEvery(['x'], () => ['x'], {
      intervalMs: 100,
      same: (a, b) => a.join() === b.join(),
      onChange: (next) => changes.push(next),
    });
    vi.advanceTimersByTime(1_000);
    expect(changes).toEqual([]);
    value.stop();
  });
});
