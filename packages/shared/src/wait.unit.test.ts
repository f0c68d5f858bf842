import { describe, expect, it } from 'vitest';
import { waitFor, WaitTimeoutError } from './wait.js';

describe('waitFor', () => {
  it('returns the first value the probe yields', async () => {
    let calls = 0;
    const value = await waitFor(() => (++calls >= 3 ? `after ${calls}` : undefined), {
      timeoutMs: 1_000,
      intervalMs: 1,
      description: 'three calls',
    });
    expect(value).toBe('after 3');
  });

  it('treats a throwing probe as not yet, and reports its last error on timeout', async () => {
    const failure = waitFor(
      () => {
        throw new Error('connection refused');
      },
      { timeoutMs: 30, intervalMs: 5, description: 'a broker' },
    );
    await expect(failure).rejects.toBeInstanceOf(WaitTimeoutError);
    await expect(failure).rejects.toThrow(/waiting for a broker: last error: connection refused/);
  });
});
