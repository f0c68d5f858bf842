/**
 * `/health/live` and `/health/ready`: what the kubelet asks, and anyone else who reaches the port.
 *
 * Readiness is answered from the last result of a timer, never by running the checks for the
 * request: 3,000 concurrent GETs used to start 3,000 `SELECT 1` and 3,000 Kafka `describeCluster`
 * calls, answered 2,894 of them 503 (the kubelet's own probe among them) and grew the process by
 * 500 MB. Now the checks run every `refreshMs` (sooner while not ready, so a pod becomes ready soon
 * after its dependencies do), at most one run of each check at a time (a check still hanging from
 * the last run is not started again, it counts as `timeout`), and a request only reads the result.
 * Before the first result, and after a check is added or replaced, requests wait for the one run in
 * flight. Liveness checks are in-memory and cheap, so they are read per request.
 *
 * The answers name each check and give a stable code, never the error: `connect ECONNREFUSED
 * <host>:<port>` or a consumer group's name are for the logs, which get the detail when a check
 * changes state (once, not per probe). Codes: `ok`; `unavailable` (the check failed), `timeout`
 * (no answer within `checkTimeoutMs`), or the code a check raised with HealthProblem
 * (`not_joined`, `crashed`, `start_failed` for consumers); `dead` for a failing liveness check.
 */
import type { FastifyInstance } from 'fastify';
import { withTimeout } from '../wait.js';

export type ReadinessCheck = () => Promise<void>;
/** Why a part of the process is dead for good (undefined while it works); in-memory state, no IO. */
export type LivenessCheck = () => string | undefined;

/** A failed check with its public code; the message goes to the log only. */
export class HealthProblem extends Error {
  override readonly name = 'HealthProblem';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

class CheckTimeout extends Error {
  override readonly name = 'CheckTimeout';
}

export interface ReadinessOptions {
  /** How often the readiness checks run while they pass (READINESS_REFRESH_MS); at most 1 s while one fails. */
  readonly refreshMs: number;
  /** A check without an answer this long counts as `timeout`. */
  readonly checkTimeoutMs: number;
}

export const DEFAULT_READINESS: ReadinessOptions = { refreshMs: 5_000, checkTimeoutMs: 3_000 };
/** The refresh while not ready: a pod joins its Service within a second of its dependencies answering. */
const NOT_READY_REFRESH_MS = 1_000;

export interface ReadinessResult {
  readonly ready: boolean;
  /** Check name to code. */
  readonly checks: Readonly<Record<string, string>>;
}

/** A Map that says when it changes, so a cached result that no longer covers every check is refreshed. */
export class HealthChecks<V> extends Map<string, V> {
  onChange: (() => void) | undefined;
  override set(name: string, check: V): this {
    super.set(name, check);
    this.onChange?.();
    return this;
  }
  override delete(name: string): boolean {
    const deleted = super.delete(name);
    if (deleted) this.onChange?.();
    return deleted;
  }
}

interface HealthLog {
  warn(details: object, message: string): void;
  info(details: object, message: string): void;
  error(details: object, message: string): void;
}

/** The readiness checks' last result, refreshed on a timer; see the module header. */
export class ReadinessCache {
  private result: ReadinessResult | undefined;
  private running: Promise<ReadinessResult> | undefined;
  private stale = true;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  /** Each check's run in flight, so a check that hangs is never started twice. */
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly codes = new Map<string, string>();

  constructor(
    private readonly checks: HealthChecks<ReadinessCheck>,
    private readonly options: ReadinessOptions,
    private readonly log: HealthLog,
  ) {
    checks.onChange = () => {
      this.stale = true;
    };
  }

  /** The cached result; waits for the run in flight only before the first result or after a change. */
  current(): Promise<ReadinessResult> {
    if (this.result && !this.stale) return Promise.resolve(this.result);
    return this.refresh();
  }

  /** Starts the timer (the first run now); idempotent. */
  start(): void {
    if (this.timer || this.stopped) return;
    const loop = async () => {
      const result = await this.refresh();
      if (this.stopped) return;
      const next = result.ready ? this.options.refreshMs : Math.min(this.options.refreshMs, NOT_READY_REFRESH_MS);
      this.timer = setTimeout(() => void loop(), next);
      this.timer.unref();
    };
    this.timer = setTimeout(() => void loop(), 0);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private refresh(): Promise<ReadinessResult> {
    this.running ??= this.run().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async run(): Promise<ReadinessResult> {
    // A change while this run goes marks the result stale again, for the next request to refresh.
    this.stale = false;
    const entries = [...this.checks];
    const codes = await Promise.all(entries.map(([name, check]) => this.runOne(name, check)));
    const checks = Object.fromEntries(entries.map(([name], i) => [name, codes[i] as string]));
    this.result = { ready: codes.every((code) => code === 'ok'), checks };
    return this.result;
  }

  private async runOne(name: string, check: ReadinessCheck): Promise<string> {
    let running = this.inFlight.get(name);
    if (!running) {
      const started = Promise.resolve().then(check);
      running = started;
      this.inFlight.set(name, started);
      started.then(
        () => this.inFlight.delete(name),
        () => this.inFlight.delete(name),
      );
    }
    let code: string;
    let error: unknown;
    try {
      await withTimeout(
        running,
        this.options.checkTimeoutMs,
        () => new CheckTimeout(`no answer within ${this.options.checkTimeoutMs} ms`),
      );
      code = 'ok';
    } catch (failure) {
      error = failure;
      code =
        failure instanceof HealthProblem ? failure.code : failure instanceof CheckTimeout ? 'timeout' : 'unavailable';
    }
    const previous = this.codes.get(name);
    this.codes.set(name, code);
    if (code !== previous) {
      if (code !== 'ok') this.log.warn({ check: name, code, err: error }, 'readiness check failing');
      else if (previous !== undefined) this.log.info({ check: name, was: previous }, 'readiness check passes again');
    }
    return code;
  }
}

/**
 * The two routes, on checks that plugins register in `app.readiness` and `app.liveness` (decorated
 * by the caller, so plugins may depend on them by the `health` plugin's name).
 */
export function registerHealthRoutes(
  app: FastifyInstance,
  options: { readonly service: string; readonly readiness: ReadinessOptions },
): ReadinessCache {
  const cache = new ReadinessCache(app.readiness, options.readiness, app.log);
  app.addHook('onReady', async () => cache.start());
  // Before any plugin closes its pool or client, so no last run reports them gone.
  app.addHook('preClose', async () => cache.stop());

  const dead = new Set<string>();
  // A restart is the cure for what fails here (a consumer kafkajs gave up on, a stalled relay).
  app.get('/health/live', { logLevel: 'warn', config: { scope: 'public' } }, async (_request, reply) => {
    const failing: Record<string, string> = {};
    for (const [name, check] of app.liveness) {
      const reason = check();
      if (reason === undefined) {
        if (dead.delete(name)) app.log.info({ check: name }, 'liveness check passes again');
        continue;
      }
      failing[name] = 'dead';
      if (!dead.has(name)) {
        dead.add(name);
        app.log.error({ check: name, reason }, 'liveness check failing');
      }
    }
    if (Object.keys(failing).length === 0) return { status: 'ok', service: options.service };
    return reply.code(503).send({ status: 'dead', service: options.service, checks: failing });
  });
  app.get('/health/ready', { logLevel: 'warn', config: { scope: 'public' } }, async (_request, reply) => {
    const { ready, checks } = await cache.current();
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? 'ready' : 'not_ready', service: options.service, checks });
  });
  return cache;
}
