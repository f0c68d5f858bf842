/**
 * The four services' APIs as the console calls them: server-side, with the console's own tokens
 * (a `read` one for pages, an `operate` one for actions). An answer is returned whatever its status,
 * so a page can show a 409's reason; a service that does not answer is `{ status: 0 }`.
 */
export const serviceNames = ['planner', 'sender', 'experiment', 'liveness'] as const;
export type ServiceName = (typeof serviceNames)[number];

export interface Answer {
  /** The HTTP status; 0 when the service did not answer (refused, timed out). */
  readonly status: number;
  readonly body: unknown;
  /** The service's reason for a refusal (its `message`), or why it did not answer. */
  readonly message: string;
}

export interface ServicesOptions {
  readonly urls: Readonly<Record<ServiceName, string>>;
  readonly readToken: () => string | undefined;
  readonly operateToken: () => string | undefined;
  readonly timeoutMs: number;
}

const MAX_ANSWER_BYTES = 4 * 1024 * 1024;

export class Services {
  constructor(private readonly options: ServicesOptions) {}

  /** A GET with the read token. */
  read(service: ServiceName, path: string): Promise<Answer> {
    return this.call(service, 'GET', path, this.options.readToken());
  }

  /** A POST that only reads (a body too large for a URL), with the read token. */
  readWithBody(service: ServiceName, path: string, body: unknown): Promise<Answer> {
    return this.call(service, 'POST', path, this.options.readToken(), body);
  }

  /** A POST or PUT with the operate token. */
  operate(service: ServiceName, method: 'POST' | 'PUT', path: string, body?: unknown): Promise<Answer> {
    return this.call(service, method, path, this.options.operateToken(), body);
  }

  /** A public route (/metrics, /health/ready): no token. */
  open(service: ServiceName, path: string): Promise<Answer> {
    return this.call(service, 'GET', path, undefined);
  }

  private async call(
    service: ServiceName,
    method: string,
    path: string,
    token: string | undefined,
    body?: unknown,
  ): Promise<Answer> {
    const url = `${this.options.urls[service].replace(/\/$/, '')}${path}`;
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        redirect: 'manual',
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (error) {
      const timedOut = error instanceof Error && error.name === 'TimeoutError';
      return {
        status: 0,
        body: undefined,
        message: `the ${service} ${timedOut ? 'did not answer in time' : 'cannot be reached'}`,
      };
    }
    const text = await readCapped(response);
    let parsed: unknown = text;
    if ((response.headers.get('content-type') ?? '').includes('json')) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
    }
    const message =
      typeof parsed === 'object' && parsed !== null && typeof (parsed as { message?: unknown }).message === 'string'
        ? (parsed as { message: string }).message
        : response.ok
          ? ''
          : `the ${service} answered ${response.status}`;
    return { status: response.status, body: parsed, message };
  }
}

async function readCapped(response: Response): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_ANSWER_BYTES) {
      await reader.cancel();
      throw new Error(`an answer larger than ${MAX_ANSWER_BYTES} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}
