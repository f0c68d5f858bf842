/**
 * The experiment service, over HTTP, batched: one round trip per experiment per chunk. The planner
 * never randomizes: no answer means the request waits (a TransientError, retried with backoff by
 * the consumer runner up to its cap, then dead-lettered as TRANSIENT_EXHAUSTED and replayable;
 * never sent without its variant).
 * A 401/403 means our token and theirs disagree, which a token rotation causes and fixes: it is
 * transient too (not the request's fault), with an alert, `outreach_planner_peer_auth_failures_total` and an
 * `alert: peer_auth_failed` log line, since it will not heal by itself if the rotation is stuck.
 */
import { counter, TransientError, type Counter, type Logger, type Registry } from '@outreach/shared';
import type { VariantDecision } from '../domain/request.js';

export type ExperimentAnswer =
  | { readonly kind: 'unknown_experiment' }
  /** A 400: the service refused the ids it was given (the experiment id, a candidate id), not our call. */
  | { readonly kind: 'refused' }
  | { readonly kind: 'decisions'; readonly byCandidate: ReadonlyMap<string, VariantDecision> };

export interface ExperimentClientObservers {
  readonly logger?: Logger;
  readonly metrics?: Registry;
}

export class ExperimentClient {
  private readonly authFailures: Counter | undefined;

  constructor(
    private readonly baseUrl: string,
    /** Asked at every call: the token file is read again while the planner runs (experiment-token.ts). */
    private readonly token: () => string,
    private readonly timeoutMs: number,
    private readonly observers: ExperimentClientObservers = {},
  ) {
    const registry = observers.metrics;
    this.authFailures = registry ? counter(registry, 'outreach_planner_peer_auth_failures_total') : undefined;
    // Exported at 0 from the start: a series born at 1 with the first refusal is no rise to increase().
    for (const status of ['401', '403']) this.authFailures?.inc({ peer: 'experiment', status }, 0);
  }

  /** A 401/403: retried like an outage, and reported so someone finishes the rotation. */
  private refused(status: number, text: string): TransientError {
    this.authFailures?.inc({ peer: 'experiment', status: String(status) });
    this.observers.logger?.error(
      { alert: 'peer_auth_failed', peer: 'experiment', status },
      'the experiment service refused our token; check EXPERIMENT_TOKEN_FILE (or EXPERIMENT_TOKEN) against its API tokens (rotation)',
    );
    return new TransientError(`experiment service refused our token (${status}): ${text.slice(0, 200)}`, {
      code: 'PEER_UNAUTHORIZED',
    });
  }

  async assign(experimentId: string, candidateIds: readonly string[]): Promise<ExperimentAnswer> {
    let response: Response;
    try {
      response = await fetch(
        `${this.baseUrl.replace(/\/$/, '')}/v1/experiments/${encodeURIComponent(experimentId)}/assignments`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${this.token()}` },
          body: JSON.stringify({ candidateIds }),
          signal: AbortSignal.timeout(this.timeoutMs),
        },
      );
    } catch (error) {
      throw new TransientError(`experiment service unreachable: ${(error as Error).message}`);
    }
    if (response.status === 404) return { kind: 'unknown_experiment' };
    if (response.status === 400) {
      await response.body?.cancel().catch(() => undefined);
      return { kind: 'refused' };
    }
    if (!response.ok) {
      const text = await response.text().catch(() => '');
      if (response.status === 401 || response.status === 403) throw this.refused(response.status, text);
      // 5xx and 429 are the service's trouble; anything else is a bug worth a loud failure.
      if (response.status >= 500 || response.status === 429)
        throw new TransientError(`experiment service answered ${response.status}: ${text.slice(0, 200)}`);
      throw new Error(`experiment service refused the batch (${response.status}): ${text.slice(0, 200)}`);
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
        // The experiment service's reads need its read scope (docs/operations.md, scopes).
        headers: { authorization: `Bearer ${this.token()}` },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new TransientError(`experiment service unreachable: ${(error as Error).message}`);
    }
    if (response.status === 404) return undefined;
    if (response.status === 401 || response.status === 403) {
      throw this.refused(response.status, await response.text().catch(() => ''));
    }
    if (!response.ok) throw new TransientError(`experiment service answered ${response.status}`);
    const body = (await response.json()) as { variants: Array<{ name: string; weight: number }> };
    return body.variants.filter((v) => v.weight > 0).map((v) => v.name);
  }
}
