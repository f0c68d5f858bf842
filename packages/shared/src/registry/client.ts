/**
 * A small client of the Confluent Schema Registry REST API (/apis/ccompat/v7 on Apicurio; Confluent's
 * own registry and Karapace serve the same paths at their root). ADR 011.
 *
 * Plain fetch rather than a registry library: we need six calls, and every one must be bounded. The
 * registry is trusted configuration, but a wedged or misconfigured one must not hang a start or a
 * partition: each request has a deadline, and a response body larger than `maxResponseBytes` is
 * refused before it is parsed.
 */
import { readBoundedBody } from '../bounded-body.js';
import { readFileSync } from 'node:fs';

export type CompatibilityLevel =
  'NONE' | 'BACKWARD' | 'BACKWARD_TRANSITIVE' | 'FORWARD' | 'FORWARD_TRANSITIVE' | 'FULL' | 'FULL_TRANSITIVE';

export interface SchemaRegistryClientOptions {
  /** Base URL of the Confluent-compatible API, e.g. http://registry:8080/apis/ccompat/v7. */
  readonly url: string;
  /** `user:password` for HTTP basic authentication (Confluent Cloud: API key and secret). */
  readonly basicAuth?: string;
  readonly timeoutMs?: number;
  readonly maxResponseBytes?: number;
}

/** The registry answered with an error, or not at all. `status` 0: no HTTP answer (network, deadline). */
export class SchemaRegistryError extends Error {
  override readonly name = 'SchemaRegistryError';
  constructor(
    readonly status: number,
    readonly errorCode: number | undefined,
    message: string,
  ) {
    super(message);
  }

  /** Nothing answered (or a 5xx): retrying later may help, unlike a refusal. */
  get unavailable(): boolean {
    return this.status === 0 || this.status >= 500;
  }
}

const CONTENT_TYPE = 'application/vnd.schemaregistry.v1+json';

/**
 * Reads SCHEMA_REGISTRY_AUTH's file: one line `user:password` (a mounted Secret). Empty path: none.
 * Read at start only; a rotation restarts the pods, as for the Kafka SASL password.
 */
export function readRegistryAuth(file: string): string | undefined {
  if (!file) return undefined;
  const text = readFileSync(file, 'utf8').trim();
  if (!/^[^:\s]+:\S+$/.test(text)) {
    throw new Error(`SCHEMA_REGISTRY_AUTH file ${file} must hold one line user:password`);
  }
  return text;
}

export class SchemaRegistryClient {
  readonly url: string;
  private readonly authorization: string | undefined;
  private readonly timeoutMs: number;
  private readonly maxResponseBytes: number;

  constructor(options: SchemaRegistryClientOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.authorization = options.basicAuth ? `Basic ${Buffer.from(options.basicAuth).toString('base64')}` : undefined;
    this.timeoutMs = options.timeoutMs ?? 5_000;
    // Our largest schema is ~10 KiB; a subject list of a shared registry can be larger.
    this.maxResponseBytes = options.maxResponseBytes ?? 1_048_576;
  }

  /** Subjects in the registry. */
  subjects(): Promise<string[]> {
    return this.request<string[]>('GET', '/subjects');
  }

  /** The schema (JSON text) with this global id. */
  async schemaById(id: number): Promise<string> {
    return (await this.request<{ schema: string }>('GET', `/schemas/ids/${id}`)).schema;
  }

  /** The id of `schema` under `subject`, or undefined when that subject does not hold it. */
  async lookup(subject: string, schema: string): Promise<number | undefined> {
    try {
      return (await this.request<{ id: number }>('POST', `/subjects/${enc(subject)}`, { schema })).id;
    } catch (error) {
      if (error instanceof SchemaRegistryError && error.status === 404) return undefined;
      throw error;
    }
  }

  /** Registers `schema` under `subject` (idempotent: the same schema gets its existing id). 409: incompatible. */
  async register(subject: string, schema: string): Promise<number> {
    return (await this.request<{ id: number }>('POST', `/subjects/${enc(subject)}/versions`, { schema })).id;
  }

  async setCompatibility(subject: string, level: CompatibilityLevel): Promise<void> {
    await this.request('PUT', `/config/${enc(subject)}`, { compatibility: level });
  }

  /** The subject's own level, or undefined when it has none (the global default applies). */
  async compatibility(subject: string): Promise<CompatibilityLevel | undefined> {
    try {
      return (await this.request<{ compatibilityLevel: CompatibilityLevel }>('GET', `/config/${enc(subject)}`))
        .compatibilityLevel;
    } catch (error) {
      if (error instanceof SchemaRegistryError && error.status === 404) return undefined;
      throw error;
    }
  }

  /** Versions of `subject`, oldest first; [] when the subject does not exist. */
  async versions(subject: string): Promise<number[]> {
    try {
      return await this.request<number[]>('GET', `/subjects/${enc(subject)}/versions`);
    } catch (error) {
      if (error instanceof SchemaRegistryError && error.status === 404) return [];
      throw error;
    }
  }

  /**
   * Deletes `subject` for good (soft delete, then permanent, as the Confluent API requires); a
   * subject that does not exist is no error. For tests and runs that clean up after themselves.
   */
  async deleteSubject(subject: string): Promise<void> {
    for (const query of ['', '?permanent=true']) {
      try {
        await this.request('DELETE', `/subjects/${enc(subject)}${query}`);
      } catch (error) {
        if (!(error instanceof SchemaRegistryError && error.status === 404)) throw error;
      }
    }
  }

  private async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const target = `${this.url}${path}`;
    let response: Response;
    try {
      response = await fetch(target, {
        method,
        headers: {
          accept: CONTENT_TYPE,
          ...(body === undefined ? {} : { 'content-type': CONTENT_TYPE }),
          ...(this.authorization ? { authorization: this.authorization } : {}),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(this.timeoutMs),
        redirect: 'error',
      });
    } catch (error) {
      const reason = error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : '';
      throw new SchemaRegistryError(0, undefined, `schema registry ${method} ${target}: no answer (${reason})`);
    }
    const text = await this.readBounded(response, `${method} ${target}`);
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      throw new SchemaRegistryError(response.status, undefined, `schema registry ${method} ${target}: not JSON`);
    }
    if (!response.ok) {
      const detail = parsed as { error_code?: number; message?: string } | undefined;
      throw new SchemaRegistryError(
        response.status,
        detail?.error_code,
        `schema registry ${method} ${target}: ${response.status} ${detail?.message ?? ''}`.trim(),
      );
    }
    return parsed as T;
  }

  private async readBounded(response: Response, what: string): Promise<string> {
    let body: Buffer | undefined;
    try {
      body = await readBoundedBody(response, this.maxResponseBytes);
    } catch (error) {
      throw new SchemaRegistryError(0, undefined, `schema registry ${what}: ${(error as Error).message}`);
    }
    if (body === undefined)
      throw new SchemaRegistryError(response.status, undefined, `schema registry ${what}: response over the limit`);
    return body.toString('utf8');
  }
}

function enc(subject: string): string {
  return encodeURIComponent(subject);
}
