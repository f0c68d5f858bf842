/** What the reliability suite's modules share: its configurations, its fixed settings and its log line. */

export interface ChaosConfig {
  /** Requests per scenario. */
  readonly requests: number;
  /** The longest a scenario may wait for one milestone (a share delivered, every request terminal). */
  readonly timeoutMs: number;
}

export const configs = {
  short: { requests: 300, timeoutMs: 240_000 },
  full: { requests: 3_000, timeoutMs: 900_000 },
} as const satisfies Record<string, ChaosConfig>;
export type ConfigName = keyof typeof configs;

export function configNamed(name: string): ConfigName {
  if (!(name in configs)) throw new Error(`--config must be one of ${Object.keys(configs).join(', ')}`);
  return name as ConfigName;
}

/** Concurrent sends per sender process: what one SIGKILL can leave in doubt. */
export const CONCURRENCY = 8;

/** The sender under faults: short leases and timeouts, so that a fault resolves within a run. */
export const FAULT_SENDER_SETTINGS: Readonly<Record<string, string>> = {
  SEND_CONCURRENCY: String(CONCURRENCY),
  SEND_BATCH_SIZE: '50',
  LEASE_MS: '4000',
  PROVIDER_TIMEOUT_MS: '1500',
  RECONCILE_INTERVAL_MS: '300',
  RETRY_BACKOFF_MS: '200',
};
export const CAMPAIGN = 'chaos';

export function say(message: string): void {
  process.stdout.write(`[chaos] ${message}\n`);
}
