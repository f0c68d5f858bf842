/**
 * The platform as real processes, for the demo and the reliability suite: each service runs from its
 * built `dist/server.js` with its own HTTP port, its own schema and consumer group under one run id,
 * so runs never see each other's data. Several instances of one service share its schema and group.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createKafka, ensureTopics, listTopicsSettled } from '@outreach/shared';
import { type OutreachRequested } from '@outreach/contracts';
import {
  dropWireFormatSubjects,
  startProcess,
  waitFor,
  wireFormatEnv,
  wireFormatFromEnv,
  type RunningProcess,
} from '@outreach/testkit';
import pg from 'pg';

export const services = ['planner', 'sender', 'experiment', 'liveness'] as const;
export type Service = (typeof services)[number];

export interface StackOptions {
  /** Names the topic prefix, the schemas (`<run>_<service>`) and the consumer groups. */
  readonly run: string;
  readonly kafkaBrokers: string;
  readonly databaseUrl: string;
  /** Service `s`, instance `i` listens on portBase + 1 + index(s) + 10 * i. */
  readonly portBase: number;
  readonly token: string;
  readonly smtpPort: number;
  /**
   * The schema registry's Confluent-compatible URL (default: SCHEMA_REGISTRY_URL). With one, public
   * topics are written in the Confluent wire format, the services' default (ADR 011), and the run's
   * subjects are registered under its prefix before the first service starts; without one (or with
   * EVENT_WIRE_FORMAT=single-object in the environment), in single-object encoding.
   */
  readonly schemaRegistryUrl?: string | undefined;
  /** Settings on top of the defaults below, per service. */
  readonly env?: (service: Service) => Record<string, string>;
  /** How an instance runs: by default a process from the service's built `dist/server.js`. */
  readonly launcher?: Launcher;
}

/**
 * Another way to run an instance than a process from `dist/` (test/container/launcher.ts runs each
 * from the image, as a container). The Stack hands it the instance's whole environment.
 */
export interface Launcher {
  start(service: Service, key: string, env: NodeJS.ProcessEnv, options: StartOptions): RunningProcess;
  /** Whether the instance reports ready (the default asks its /health/ready). */
  ready?(key: string): Promise<boolean>;
  /** Kills every instance synchronously: the runner is exiting. */
  killAll?(): void;
}

export interface StartOptions {
  readonly instance?: number;
  /** Extra environment for this one process (for example LD_PRELOAD and FAKETIME). */
  readonly env?: Record<string, string>;
  readonly nodeArgs?: readonly string[];
  readonly readyTimeoutMs?: number;
}

const root = join(import.meta.dirname, '..', '..');

export class Stack {
  readonly prefix: string;
  readonly processes = new Map<string, RunningProcess>();
  /** The run's own emailHash key: nothing outside the run can recompute its hashes. */
  readonly emailHashKey = {
    EMAIL_HASH_KEY: randomBytes(32).toString('hex'),
    EMAIL_HASH_KEY_ID: `run-${randomUUID().slice(0, 8)}`,
  };
  /** The run's own identifier key (the sender's Message-IDs, ENVIDs and unsubscribe tokens, ADR 012). */
  readonly identifierKey = {
    IDENTIFIER_KEY: randomBytes(32).toString('hex'),
    IDENTIFIER_KEY_ID: `run-${randomUUID().slice(0, 8)}`,
  };
  /** The run's own suppression key (data-subject requests, ADR 014): the same in the four services. */
  readonly suppressionKey = { SUPPRESSION_KEY: randomBytes(32).toString('hex') };
  /** Whatever happens to the runner (a crash, Ctrl-C), its services do not outlive it. */
  private readonly exitGuard = () => this.killAll();
  /** The wire-format settings, once the run's subjects are registered (before the first start). */
  private wireFormat: Promise<Record<string, string>> | undefined;

  constructor(private readonly options: StackOptions) {
    this.prefix = `${options.run}.`;
    process.on('exit', this.exitGuard);
  }

  get run(): string {
    return this.options.run;
  }

  /** How the run's services write public topics: `confluent` when a registry is known. */
  get eventWireFormat(): 'confluent' | 'single-object' {
    return wireFormatFromEnv({ ...process.env, SCHEMA_REGISTRY_URL: this.registryUrl }).format;
  }

  get registryUrl(): string | undefined {
    return this.options.schemaRegistryUrl || process.env.SCHEMA_REGISTRY_URL || undefined;
  }

  private wireFormatEnv(): Promise<Record<string, string>> {
    this.wireFormat ??= wireFormatEnv(this.prefix, this.eventWireFormat, this.registryUrl);
    return this.wireFormat;
  }

  /** Creates the run's topics (every declared topic and its DLQ, under the run's prefix). */
  async createTopics(partitions?: number): Promise<void> {
    const admin = createKafka({ brokers: this.options.kafkaBrokers.split(','), clientId: `${this.run}-admin` }).admin();
    await admin.connect();
    try {
      await ensureTopics(admin, { prefix: this.prefix, ...(partitions === undefined ? {} : { partitions }) });
    } finally {
      await admin.disconnect();
    }
  }

  /** Deletes the run's topics and drops the schemas of the given services. */
  async dropData(schemaOf: readonly Service[]): Promise<void> {
    await dropRunData(
      { kafkaBrokers: this.options.kafkaBrokers, databaseUrl: this.options.databaseUrl },
      this.prefix,
      schemaOf.map((service) => this.schema(service)),
    );
    if (this.wireFormat) await dropWireFormatSubjects(this.prefix, this.registryUrl);
  }

  port(service: Service, instance = 0): number {
    return this.options.portBase + 1 + services.indexOf(service) + 10 * instance;
  }

  url(service: Service, path: string, instance = 0): string {
    return `http://127.0.0.1:${this.port(service, instance)}${path}`;
  }

  schema(service: Service): string {
    return `${this.options.run}_${service}`;
  }

  env(service: Service, instance = 0): NodeJS.ProcessEnv {
    const { options } = this;
    return {
      PATH: process.env.PATH,
      KAFKA_BROKERS: options.kafkaBrokers,
      DATABASE_URL: options.databaseUrl,
      DATABASE_SCHEMA: this.schema(service),
      TOPIC_PREFIX: this.prefix,
      CONSUMER_GROUP: `${options.run}-${service}`,
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: String(this.port(service, instance)),
      // One token in every scope: the runner publishes, operates and reads. Its budget is generous,
      // since a benchmark is one very busy client.
      API_TOKENS_PUBLISH: options.token,
      API_TOKENS_OPERATE: options.token,
      API_TOKENS_READ: options.token,
      API_TOKENS_DSN: options.token,
      API_TOKENS_ERASE: options.token,
      RATE_LIMIT_MAX: '100000000',
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
      NODE_ENV: 'development',
      ...this.suppressionKey,
      // sender
      ...this.emailHashKey,
      ...this.identifierKey,
      SMTP_PORT: String(options.smtpPort),
      // The suites' SMTP sinks offer no TLS.
      SMTP_REQUIRE_TLS: 'false',
      SEND_CONCURRENCY: '16',
      SEND_RATE_PER_SECOND: '1000',
      LEASE_MS: '8000',
      PROVIDER_TIMEOUT_MS: '3000',
      RECONCILE_INTERVAL_MS: '500',
      // planner
      EXPERIMENT_URL: this.url('experiment', ''),
      EXPERIMENT_TOKEN: options.token,
      // Data-subject requests (ADR 014): the planner asks its peers for their parts.
      SENDER_URL: this.url('sender', ''),
      SENDER_TOKEN: options.token,
      LIVENESS_URL: this.url('liveness', ''),
      LIVENESS_TOKEN: options.token,
      SCHEDULER_INTERVAL_MS: '200',
      ...options.env?.(service),
    };
  }

  static key(service: Service, instance = 0): string {
    return instance === 0 ? service : `${service}#${instance}`;
  }

  /** Starts one instance and resolves once its readiness route answers 200. */
  async start(service: Service, startOptions: StartOptions = {}): Promise<RunningProcess> {
    const instance = startOptions.instance ?? 0;
    const key = Stack.key(service, instance);
    const running = this.processes.get(key);
    if (running && running.child.exitCode === null && running.child.signalCode === null) {
      throw new Error(`${key} is already running`);
    }
    if (!running && (await answers(this.url(service, '/health/live', instance)))) {
      throw new Error(
        `port ${this.port(service, instance)} is already in use (another run?); choose another port base`,
      );
    }
    const wireFormat = await this.wireFormatEnv();
    const env = { ...this.env(service, instance), ...wireFormat, ...startOptions.env };
    const { launcher } = this.options;
    const proc = launcher
      ? launcher.start(service, key, env, startOptions)
      : startProcess(join(root, 'services', service, 'dist', 'server.js'), env, [], startOptions.nodeArgs ?? []);
    this.processes.set(key, proc);
    await waitFor(
      async () => {
        if (proc.child.exitCode !== null) throw new Error(`${key} exited: ${proc.stderrLines.join('\n')}`);
        if (launcher?.ready) return launcher.ready(key);
        return (await fetch(this.url(service, '/health/ready', instance))).ok;
      },
      { timeoutMs: startOptions.readyTimeoutMs ?? 60_000, description: `${key} to report ready` },
    );
    return proc;
  }

  async stop(service: Service, signal: NodeJS.Signals, instance = 0): Promise<void> {
    await this.processes.get(Stack.key(service, instance))?.stop(signal);
  }

  async stopAll(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    await Promise.all([...this.processes.values()].map((p) => p.stop(signal).catch(() => p.stop('SIGKILL'))));
    process.off('exit', this.exitGuard);
  }

  /** Kills every process synchronously: for `process.on('exit')`, so no service outlives its runner. */
  killAll(): void {
    for (const proc of this.processes.values()) proc.child.kill('SIGKILL');
    this.options.launcher?.killAll?.();
  }

  /** The last lines each process wrote, for a failure message. */
  tails(lines = 10): string {
    return [...this.processes]
      .map(([key, proc]) => {
        const tail = [...proc.stderrLines.slice(-lines), ...proc.stdoutLines.slice(-lines)];
        return tail.length > 0 ? `--- ${key}:\n${tail.join('\n')}` : '';
      })
      .filter(Boolean)
      .join('\n');
  }

  /** GET or POST with the bearer token; throws with the body on a non-2xx answer. */
  async json<T>(service: Service, path: string, init: { method?: string; body?: unknown } = {}): Promise<T> {
    const response = await fetch(this.url(service, path), {
      method: init.method ?? 'GET',
      headers: { authorization: `Bearer ${this.options.token}`, 'content-type': 'application/json' },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    });
    if (!response.ok) throw new Error(`${response.url} answered ${response.status}: ${await response.text()}`);
    return (await response.json()) as T;
  }
}

async function answers(url: string): Promise<boolean> {
  return fetch(url).then(
    () => true,
    () => false,
  );
}

/** The planner's HTTP ingress body for a request (the event without its envelope). */
export function ingressBody(r: OutreachRequested): Record<string, unknown> {
  return {
    requestId: r.requestId,
    campaignId: r.campaignId,
    candidateId: r.candidateId,
    email: r.email,
    step: r.step,
    experimentId: r.experimentId,
    contents: r.contents,
    followUps: r.followUps,
    ...(r.conversationId === null ? {} : { conversationId: r.conversationId }),
    ...(r.sendAt === null ? {} : { sendAt: r.sendAt }),
  };
}

/** Deletes every topic under `prefix` and drops `schemas`: a run leaves nothing on a shared broker or database. */
export async function dropRunData(
  infra: { readonly kafkaBrokers: string; readonly databaseUrl: string },
  prefix: string,
  schemas: readonly string[],
): Promise<void> {
  const admin = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'drop-run' }).admin();
  await admin.connect();
  try {
    const mine = (await listTopicsSettled(admin)).filter((topic) => topic.startsWith(prefix));
    if (mine.length > 0) await admin.deleteTopics({ topics: mine });
  } finally {
    await admin.disconnect();
  }
  const client = new pg.Client({ connectionString: infra.databaseUrl });
  await client.connect();
  try {
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** An OutreachRequested as another system would publish it; the envelope and defaults filled in. */
export function outreachRequest(
  fields: Pick<OutreachRequested, 'requestId' | 'campaignId' | 'candidateId' | 'email'> & Partial<OutreachRequested>,
  producer = 'ats',
): OutreachRequested {
  return {
    type: 'OutreachRequested',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer,
    correlationId: randomUUID(),
    causationId: null,
    conversationId: null,
    sendAt: null,
    step: 'intro',
    experimentId: null,
    contents: [{ variant: null, subject: 'A role for you', body: 'Would you like to talk about a role?' }],
    followUps: [],
    ...fields,
  };
}
