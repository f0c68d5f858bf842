/**
 * The registry at run time (ADR 011). At start, once: every version of every public subject is
 * looked up (never registered: `npm run schemas:register` does that) and its id bound in the codec;
 * with EVENT_WIRE_FORMAT=confluent the current schema's id becomes what producers write. After that
 * the hot path never calls the registry: ids are local, a registry outage changes nothing.
 *
 * An id first seen in flight (a newer writer than this build) is fetched once, bounded by the
 * client's deadline and size limit, before the batch is decoded; a failed fetch is remembered for
 * `negativeTtlMs`, and the message goes to the DLQ as UNKNOWN_SCHEMA_ID (replayable), so a missing
 * registry neither blocks the partition nor crash-loops the consumer.
 */
import { eventCodec, type EventCodec } from '@outreach/contracts';
import type { EventType } from '@outreach/contracts';
import { StartupError } from '../service/startup-error.js';
import { readRegistryAuth, SchemaRegistryClient, SchemaRegistryError } from './client.js';
import { registrySubjects, type WireFormat } from './subjects.js';

export interface RegistryBindingConfig {
  /** `confluent` or `single-object` (the config schema admits only those). */
  readonly EVENT_WIRE_FORMAT: string;
  readonly SCHEMA_REGISTRY_URL: string;
  readonly SCHEMA_REGISTRY_AUTH: string;
  readonly SCHEMA_REGISTRY_TIMEOUT_MS: number;
  readonly SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: number;
  readonly TOPIC_PREFIX: string;
}

export interface RegistryBinding {
  readonly format: WireFormat;
  /** Registry id of each event type's current schema (the ones producers write in confluent format). */
  readonly currentIds: ReadonlyMap<EventType, number>;
  readonly resolver: SchemaIdResolver;
}

/** What bounds the resolver's memory and its registry traffic (a publisher chooses the ids it writes). */
export interface SchemaIdResolverLimits {
  /** Failed ids remembered at most (oldest forgotten first; expired ones pruned on every insert). */
  readonly maxFailed?: number;
  /** Distinct unknown ids looked up per batch; the others stay unknown (UNKNOWN_SCHEMA_ID, replayable). */
  readonly maxLookupsPerBatch?: number;
}

export const SCHEMA_ID_RESOLVER_LIMITS = { maxFailed: 1_000, maxLookupsPerBatch: 8 } as const;

/**
 * Learns ids seen in flight: one bounded fetch per id, failures remembered for a while. Both are
 * bounded: a publisher writing records under many made-up ids gets at most `maxLookupsPerBatch`
 * registry calls per batch (the rest go to the DLQ as UNKNOWN_SCHEMA_ID, as after a failed lookup),
 * and the failures remembered never exceed `maxFailed`.
 */
export class SchemaIdResolver {
  private readonly failedUntil = new Map<number, number>();
  private readonly pending = new Map<number, Promise<void>>();
  private readonly maxFailed: number;
  private readonly maxLookupsPerBatch: number;

  constructor(
    readonly client: SchemaRegistryClient,
    private readonly codec: EventCodec,
    private readonly negativeTtlMs = 30_000,
    limits: SchemaIdResolverLimits = {},
  ) {
    this.maxFailed = Math.max(1, limits.maxFailed ?? SCHEMA_ID_RESOLVER_LIMITS.maxFailed);
    this.maxLookupsPerBatch = Math.max(1, limits.maxLookupsPerBatch ?? SCHEMA_ID_RESOLVER_LIMITS.maxLookupsPerBatch);
  }

  /** How many failed ids are remembered (for tests and diagnostics). */
  get failedCount(): number {
    return this.failedUntil.size;
  }

  /** Learns what it can of `ids`; never throws (what stays unknown is dead-lettered by the decoder). */
  async learn(ids: readonly number[]): Promise<void> {
    const now = Date.now();
    const wanted = [...new Set(ids)]
      .filter((id) => !this.codec.knowsSchemaId(id) && (this.failedUntil.get(id) ?? 0) <= now)
      .slice(0, this.maxLookupsPerBatch);
    await Promise.all(
      wanted.map((id) => {
        const running = this.pending.get(id);
        if (running) return running;
        const attempt = this.client
          .schemaById(id)
          .then((schema) => {
            this.codec.learnSchema(id, schema);
          })
          .catch(() => this.remember(id))
          .finally(() => this.pending.delete(id));
        this.pending.set(id, attempt);
        return attempt;
      }),
    );
  }

  /** Remembers a failed id: expired entries go first, then the oldest while the map is full. */
  private remember(id: number): void {
    const now = Date.now();
    for (const [known, until] of this.failedUntil) if (until <= now) this.failedUntil.delete(known);
    this.failedUntil.delete(id);
    while (this.failedUntil.size >= this.maxFailed) {
      const oldest = this.failedUntil.keys().next();
      if (oldest.done) break;
      this.failedUntil.delete(oldest.value);
    }
    this.failedUntil.set(id, now + this.negativeTtlMs);
  }
}

let active: SchemaIdResolver | undefined;

/**
 * For the consumer, before it decodes a batch: learns the Confluent ids among `values` the codec does
 * not know yet. Costs a first-byte check per message when every id is known (the usual case).
 */
export async function learnUnknownSchemaIds(
  values: Iterable<Uint8Array | null | undefined>,
  codec: EventCodec = eventCodec,
): Promise<void> {
  if (!active) return;
  const unknown = codec.unknownSchemaIds(values);
  if (unknown.length > 0) await active.learn(unknown);
}

function registryFailure(error: unknown, url: string): StartupError {
  if (error instanceof SchemaRegistryError && (error.status === 401 || error.status === 403)) {
    return new StartupError(
      'schema-registry',
      'authentication',
      `the schema registry at ${url} refused our credentials (${error.status}); check SCHEMA_REGISTRY_AUTH`,
    );
  }
  return new StartupError(
    'schema-registry',
    'unreachable',
    `the schema registry at ${url} did not answer: ${(error as Error).message}. ` +
      'This service reads or writes registry-encoded topics (ADR 011) and does not start without it.',
  );
}

/**
 * Binds the registry's ids into `codec` at start. Throws StartupError (the process exits, naming the
 * cause) when the registry is configured but unreachable, or, in confluent format, when a subject
 * lacks this build's current schema. Without SCHEMA_REGISTRY_URL in single-object format: nothing.
 */
export async function bindSchemaRegistry(
  config: RegistryBindingConfig,
  codec: EventCodec = eventCodec,
): Promise<RegistryBinding | undefined> {
  const format: WireFormat = config.EVENT_WIRE_FORMAT === 'confluent' ? 'confluent' : 'single-object';
  if (!config.SCHEMA_REGISTRY_URL) {
    if (format === 'confluent') {
      throw new StartupError(
        'schema-registry',
        'configuration',
        'public topics are written in the Confluent wire format (EVENT_WIRE_FORMAT=confluent, the default), which ' +
          'needs SCHEMA_REGISTRY_URL (the Confluent-compatible API of the schema registry; `npm run infra:env` ' +
          'prints the local one). Without a registry, set EVENT_WIRE_FORMAT=single-object (ADR 011).',
      );
    }
    return undefined;
  }
  let basicAuth: string | undefined;
  try {
    basicAuth = readRegistryAuth(config.SCHEMA_REGISTRY_AUTH);
  } catch (error) {
    throw new StartupError('schema-registry', 'configuration', (error as Error).message);
  }
  const client = new SchemaRegistryClient({
    url: config.SCHEMA_REGISTRY_URL,
    timeoutMs: config.SCHEMA_REGISTRY_TIMEOUT_MS,
    ...(basicAuth ? { basicAuth } : {}),
  });
  const deadline = Date.now() + config.SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS;
  const lookup = async (subject: string, schema: string): Promise<number | undefined> => {
    for (;;) {
      try {
        return await client.lookup(subject, schema);
      } catch (error) {
        if (!(error instanceof SchemaRegistryError) || !error.unavailable || Date.now() >= deadline) {
          throw registryFailure(error, client.url);
        }
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  };
  const currentIds = new Map<EventType, number>();
  for (const subject of registrySubjects(config.TOPIC_PREFIX)) {
    let currentId: number | undefined;
    for (const [index, schema] of subject.versions.entries()) {
      const id = await lookup(subject.subject, schema);
      if (id === undefined) continue;
      codec.learnSchema(id, schema);
      if (index === subject.versions.length - 1) currentId = id;
    }
    if (currentId !== undefined) currentIds.set(subject.eventType, currentId);
    else if (format === 'confluent') {
      throw new StartupError(
        'schema-registry',
        'configuration',
        `subject ${subject.subject} does not hold this build's ${subject.eventType} schema; producers never register ` +
          'schemas: run `npm run schemas:register` (the migrate Job does) before this version starts',
      );
    }
  }
  if (format === 'confluent') for (const [type, id] of currentIds) codec.bindSchemaId(type, id);
  const resolver = new SchemaIdResolver(client, codec);
  if (codec === eventCodec) active = resolver;
  return { format, currentIds, resolver };
}

/** Undoes bindSchemaRegistry for the shared codec (tests that switch formats). */
export function unbindSchemaRegistry(codec: EventCodec = eventCodec): void {
  codec.clearSchemaIds();
  if (codec === eventCodec) active = undefined;
}
