/**
 * The experiment service, over HTTP, batched: one round trip per experiment per chunk. The planner
 * never randomizes: no answer means the request waits (a TransientError, retried with backoff by
 * the consumer runner, never dropped and never sent without its variant).
 */
import { TransientError } from '@outreach/shared';
import type { VariantDecision } from '../domain/request.js';

export type ExperimentAnswer =
  | { readonly kind: 'unknown_experiment' }
  | { readonly kind: 'decisions'; readonly byCandidate: ReadonlyMap<string, VariantDecision> };

export class ExperimentClient {
  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
    private readonly timeoutMs: number,
  ) {}

  async assign(experimentId: string, candidateIds: readonly string[]): Promise<ExperimentAnswer> {
    let response: Response;
    try {
      response = await fetch(
        `${this.baseUrl.replace(/\/$/, '')}/v1/experiments/${encodeURIComponent(experimentId)}/assignments`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${this.token}` },
          body: JSON.stringify({ candidateIds }),
          signal: AbortSignal.timeout(this.timeoutMs),
        },
      );
    } catch (error) {
      throw new TransientError(`experiment service unreachable: ${(error as Error).message}`);
    }
    if (response.status === 404) return { kind: 'unknown_experiment' };
    if (!response.ok) {
      const text = await response.text().catch(() => '');
      // 5xx and 429 are the service's trouble; anything else is a bug worth a loud failure.
      if (response.status >= 500 || response.status === 429)
        throw new TransientError(`experiment service answered ${response.status}: ${text}`);
      throw new Error(`experiment service refused the batch (${response.status}): ${text}`);
    }
    const body = (await response.json()) as {
      assignments: Array<{ candidateKey: string; enrolled: boolean; variant?: string; reason?: string }>;
    };
    const byCandidate = new Map<string, VariantDecision>();
    for (const a of body.assignments) {
      byCandidate.set(
        a.candidateKey,
        a.enrolled
          ? { enrolled: true, variant: a.variant as string }
          : { enrolled: false, reason: a.reason ?? 'not enrolled' },
      );
    }
    return { kind: 'decisions', byCandidate };
  }

  /** For HTTP ingress: the experiment's variants, or undefined when it does not exist. */
  async variants(experimentId: string): Promise<string[] | undefined> {
    let response: Response;
    try {
      response = await fetch(`${this.baseUrl.replace(/\/$/, '')}/v1/experiments/${encodeURIComponent(experimentId)}`, {
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new TransientError(`experiment service unreachable: ${(error as Error).message}`);
    }
    if (response.status === 404) return undefined;
    if (!response.ok) throw new TransientError(`experiment service answered ${response.status}`);
    const body = (await response.json()) as { variants: Array<{ name: string; weight: number }> };
    return body.variants.filter((v) => v.weight > 0).map((v) => v.name);
  }
}
