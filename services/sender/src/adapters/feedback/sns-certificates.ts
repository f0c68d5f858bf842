/**
 * SNS signing certificates, fetched from the URL a message names once the domain has checked it
 * (`snsCertificateUrl`: https on sns.<region>.amazonaws.com, checked again here so no caller can
 * skip it), and kept: the file name is a digest of the certificate, so a URL's content does not
 * change and one fetch serves every message signed with it.
 *
 * Bounded every way a hostile or broken peer could stretch it: one request per URL at a time
 * (concurrent asks share it), no redirects (a redirect could leave the checked host), a deadline
 * over the whole exchange body included, a byte limit read as the body streams (a declared
 * Content-Length is not trusted), at most `maxEntries` certificates cached, each for `ttlMs`.
 * A failure is an AppError UNAVAILABLE (503: SNS retries later), never cached.
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
  readonly clock?: () => number;
}

export const SNS_CERTIFICATE_DEFAULTS = {
  timeoutMs: 5_000,
  // SNS certificates are about 2 KB of PEM.
  maxBytes: 64 * 1024,
  ttlMs: 24 * 60 * 60 * 1000,
  maxEntries: 32,
} as const;

export class SnsCertificateCache implements SnsCertificateSource {
  private readonly entries = new Map<string, { readonly pem: string; readonly expires: number }>();
  private readonly inflight = new Map<string, Promise<string>>();
  private readonly fetchImpl: typeof globalThis.fetch;
  private readonly timeoutMs: number;
  private readonly maxBytes: number;
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly clock: () => number;

  constructor(options: SnsCertificateCacheOptions = {}) {
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.timeoutMs = options.timeoutMs ?? SNS_CERTIFICATE_DEFAULTS.timeoutMs;
    this.maxBytes = options.maxBytes ?? SNS_CERTIFICATE_DEFAULTS.maxBytes;
    this.ttlMs = options.ttlMs ?? SNS_CERTIFICATE_DEFAULTS.ttlMs;
    this.maxEntries = options.maxEntries ?? SNS_CERTIFICATE_DEFAULTS.maxEntries;
    this.clock = options.clock ?? Date.now;
  }

  /** Certificates held now. */
  get size(): number {
    return this.entries.size;
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
    const fetched = this.fetchCertificate(checked)
      .then((pem) => {
        this.entries.delete(checked);
        this.entries.set(checked, { pem, expires: this.clock() + this.ttlMs });
        for (const oldest of this.entries.keys()) {
          if (this.entries.size <= this.maxEntries) break;
          this.entries.delete(oldest);
        }
        return pem;
      })
      .finally(() => this.inflight.delete(checked));
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
