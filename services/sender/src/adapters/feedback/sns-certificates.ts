/**
 * SNS signing certificates, fetched from the URL a message names once the domain has checked it
 * (`snsCertificateUrl`: https on sns.<region>.amazonaws.com, checked again here so no caller can
 * skip it), and kept: the file name is a digest of the certificate, so a URL's content does not
 * change and one fetch serves every message signed with it.
 *
 * Bounded every way a hostile or broken peer could stretch it: one request per URL at a time
 * (concurrent asks share it), at most `maxConcurrentFetches` URLs fetched at once (another ask
 * fails at once, fetching nothing), no redirects (a redirect could leave the checked host), a
 * deadline over the whole exchange body included, a byte limit read as the body streams (a declared
 * Content-Length is not trusted), at most `maxEntries` certificates cached, each for `ttlMs`.
 *
 * Made-up URLs (anyone who knows an allowed topic can name any .pem on SNS's host, each a fetch
 * before any signature can be checked) must not keep SNS's own certificate out. So: a certificate
 * fetched from SNS's host is kept until newer ones push it out (its name is a digest: it never
 * changes), which keeps a warm replica immune; and one more fetch slot is kept for a URL asked for
 * before, while the others were busy, and not failed: SNS retries a message with the same URL, while each made-up name that
 * was fetched and failed is answered from the failure memory. A cold replica under such a flood
 * takes SNS's message on a retry (issue #31, attacks.md "SNS certificate URLs").
 *
 * A failure is an AppError UNAVAILABLE (503: SNS retries later), and is remembered for
 * `failureTtlMs` (at most `maxFailures` URLs, the least recently failed forgotten first): a caller
 * who knows an allowed topic and repeats a certificate URL that does not answer costs one outbound
 * request per URL and failure window, not one per request. The window is short, so a certificate
 * that comes back is fetched again within it; SNS's retries come later than that anyway.
 */
import { X509Certificate } from 'node:crypto';
import { AppError, readBoundedBody } from '@outreach/shared';
import { snsCertificateUrl } from '../../domain/feedback/sns.js';

export interface SnsCertificateSource {
  /** The PEM certificate at `url`; throws AppError FORBIDDEN for a URL SNS would not use. */
  get(url: string): Promise<string>;
}

export interface SnsCertificateCacheOptions {
  /** The HTTP client; tests route it to a local server. */
  readonly fetch?: typeof globalThis.fetch;
  readonly timeoutMs?: number;
  readonly maxBytes?: number;
  readonly ttlMs?: number;
  readonly maxEntries?: number;
  /** How long a failed fetch is answered from memory. */
  readonly failureTtlMs?: number;
  /** Failed URLs remembered at most. */
  readonly maxFailures?: number;
  /** Distinct URLs fetched at once (one more for a URL asked for again after the slots were busy). */
  readonly maxConcurrentFetches?: number;
  readonly clock?: () => number;
}

export const SNS_CERTIFICATE_DEFAULTS = {
  timeoutMs: 5_000,
  // SNS certificates are about 2 KB of PEM.
  maxBytes: 64 * 1024,
  // Kept until pushed out by newer ones (maxEntries); a month bounds how long one unused stays.
  ttlMs: 30 * 24 * 60 * 60 * 1000,
  maxEntries: 32,
  failureTtlMs: 30_000,
  maxFailures: 256,
  maxConcurrentFetches: 4,
} as const;

/** Forgets the least recently used entries of `map` (its insertion order) past `max`. */
function bound(map: Map<string, unknown>, max: number): void {
  for (const oldest of map.keys()) {
    if (map.size <= max) break;
    map.delete(oldest);
  }
}

export class SnsCertificateCache implements SnsCertificateSource {
  private readonly entries = new Map<string, { readonly pem: string; readonly expires: number }>();
  private readonly failures = new Map<string, { readonly message: string; readonly expires: number }>();
  private readonly inflight = new Map<string, Promise<string>>();
  /** URLs asked for while every open slot was busy (bounded): their retry may take the kept slot. */
  private readonly waiting = new Map<string, true>();
  /** Whether the kept slot is fetching now. */
  private keptSlotBusy = false;
  private readonly fetchImpl: typeof globalThis.fetch;
  private readonly timeoutMs: number;
  private readonly maxBytes: number;
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly failureTtlMs: number;
  private readonly maxFailures: number;
  private readonly maxConcurrentFetches: number;
  private readonly clock: () => number;

  constructor(options: SnsCertificateCacheOptions = {}) {
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.timeoutMs = options.timeoutMs ?? SNS_CERTIFICATE_DEFAULTS.timeoutMs;
    this.maxBytes = options.maxBytes ?? SNS_CERTIFICATE_DEFAULTS.maxBytes;
    this.ttlMs = options.ttlMs ?? SNS_CERTIFICATE_DEFAULTS.ttlMs;
    this.maxEntries = options.maxEntries ?? SNS_CERTIFICATE_DEFAULTS.maxEntries;
    this.failureTtlMs = options.failureTtlMs ?? SNS_CERTIFICATE_DEFAULTS.failureTtlMs;
    this.maxFailures = options.maxFailures ?? SNS_CERTIFICATE_DEFAULTS.maxFailures;
    this.maxConcurrentFetches = options.maxConcurrentFetches ?? SNS_CERTIFICATE_DEFAULTS.maxConcurrentFetches;
    this.clock = options.clock ?? Date.now;
  }

  /** Certificates held now. */
  get size(): number {
    return this.entries.size;
  }

  /** Failed URLs remembered now. */
  get failedSize(): number {
    return this.failures.size;
  }

  get(url: string): Promise<string> {
    const checked = snsCertificateUrl(url);
    if (checked === undefined) return Promise.reject(new AppError('FORBIDDEN', 'SNS certificate URL refused'));
    const cached = this.entries.get(checked);
    if (cached && cached.expires > this.clock()) {
      // Re-inserted: Map order is the eviction order, least recently used first.
      this.entries.delete(checked);
      this.entries.set(checked, cached);
      return Promise.resolve(cached.pem);
    }
    const pending = this.inflight.get(checked);
    if (pending) return pending;
    const failed = this.failures.get(checked);
    if (failed && failed.expires > this.clock())
      return Promise.reject(
        new AppError(
          'UNAVAILABLE',
          `${failed.message} (not fetched again for ${Math.ceil((failed.expires - this.clock()) / 1000)} s)`,
        ),
      );
    this.failures.delete(checked);
    const openBusy = this.inflight.size - (this.keptSlotBusy ? 1 : 0);
    let kept = false;
    if (openBusy >= this.maxConcurrentFetches) {
      // A URL asked for before, while the slots were busy, takes the kept slot if it is free.
      if (!this.keptSlotBusy && this.waiting.has(checked)) kept = true;
      else {
        this.waiting.set(checked, true);
        bound(this.waiting, this.maxFailures);
        return Promise.reject(
          new AppError('UNAVAILABLE', `SNS signing certificate fetch: ${this.inflight.size} fetches in flight already`),
        );
      }
    }
    this.waiting.delete(checked);
    if (kept) this.keptSlotBusy = true;
    const fetched = this.fetchCertificate(checked)
      .then(
        (pem) => {
          this.entries.delete(checked);
          this.entries.set(checked, { pem, expires: this.clock() + this.ttlMs });
          bound(this.entries, this.maxEntries);
          return pem;
        },
        (error: unknown) => {
          const message = error instanceof Error ? error.message : 'SNS signing certificate fetch: failed';
          this.failures.set(checked, { message, expires: this.clock() + this.failureTtlMs });
          bound(this.failures, this.maxFailures);
          throw error;
        },
      )
      .finally(() => {
        this.inflight.delete(checked);
        if (kept) this.keptSlotBusy = false;
      });
    this.inflight.set(checked, fetched);
    return fetched;
  }

  private async fetchCertificate(url: string): Promise<string> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    let response: Response;
    try {
      response = await this.fetchImpl(url, { redirect: 'error', signal, headers: { accept: '*/*' } });
    } catch (error) {
      throw unavailable(signal.aborted ? `no answer within ${this.timeoutMs} ms` : 'request failed', error);
    }
    if (response.status !== 200) {
      await response.body?.cancel().catch(() => undefined);
      throw unavailable(`HTTP ${response.status}`);
    }
    const declared = Number(response.headers.get('content-length') ?? Number.NaN);
    if (declared > this.maxBytes) {
      await response.body?.cancel().catch(() => undefined);
      throw unavailable(`Content-Length over ${this.maxBytes} bytes`);
    }
    const pem = (await this.readBounded(response, signal)).trim();
    if (!/^-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----$/.test(pem))
      throw unavailable('not a PEM certificate');
    try {
      new X509Certificate(pem);
    } catch (error) {
      throw unavailable('unreadable certificate', error);
    }
    return pem;
  }

  private async readBounded(response: Response, signal: AbortSignal): Promise<string> {
    let body: Buffer | undefined;
    try {
      body = await readBoundedBody(response, this.maxBytes);
    } catch (error) {
      throw unavailable(signal.aborted ? `no answer within ${this.timeoutMs} ms` : 'body failed', error);
    }
    if (body === undefined) throw unavailable(`body over ${this.maxBytes} bytes`);
    return body.toString('latin1');
  }
}

function unavailable(what: string, cause?: unknown): AppError {
  const error = new AppError('UNAVAILABLE', `SNS signing certificate fetch: ${what}`);
  if (cause !== undefined) (error as { cause?: unknown }).cause = cause;
  return error;
}
