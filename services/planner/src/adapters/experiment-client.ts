/**
 * The experiment service, over HTTP, batched: one round trip per experiment per chunk. The planner
 * never randomizes: no answer means the request waits (a TransientError, retried with backoff by
 * the consumer runner up to its cap, then dead-lettered as TRANSIENT_EXHAUSTED and replayable;
 * never sent without its variant).
 * A 401/403 means our token and theirs disagree, which a token rotation causes and fixes: it is
 * transient too (not the request's fault), with an alert, `outreach_planner_peer_auth_failures_total` and an
 * `alert: peer_auth_failed` log line, since it will not heal by itself if the rotation is stuck.
 */
import {
  boundedText,
  counter,
  readBoundedJson,
  TransientError,
  type Counter,
  type Logger,
  type Registry,
} from '@outreach/shared';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { VariantDecision } from '../domain/request.js';

/**
 * The largest answer read: an assignment is ~150 bytes and a call carries one chunk of candidates
 * (REQUEST_BATCH_SIZE, 500 by default), so 4 MiB is ten times the most a healthy service sends.
 */
export const MAX_ANSWER_BYTES = 4 * 1024 * 1024;

/** What the experiment service answers, checked before use: a peer's bytes are input like any other. */
const AssignmentsAnswer = Type.Object({
  assignments: Type.Array(
    Type.Union([
      Type.Object({ candidateKey: Type.String(), enrolled: Type.Literal(true), variant: Type.String() }),
      Type.Object({ candidateKey: Type.String(), enrolled: Type.Literal(false), reason: Type.Optional(Type.String()) }),
    ]),
  ),
});
const ExperimentAnswerBody = Type.Object({
  variants: Type.Array(Type.Object({ name: Type.String(), weight: Type.Number() })),
});

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
      const text = await boundedText(response);
      if (response.status === 401 || response.status === 403) throw this.refused(response.status, text);
      // 5xx and 429 are the service's trouble; anything else is a bug worth a loud failure.
      if (response.status >= 500 || response.status === 429)
        throw new TransientError(`experiment service answered ${response.status}: ${text.slice(0, 200)}`);
      throw new Error(`experiment service refused the batch (${response.status}): ${text.slice(0, 200)}`);
    }
    const body = await answer(response, AssignmentsAnswer, 'assignments');
    const byCandidate = new Map<string, VariantDecision>();
    for (const a of body.assignments) {
      byCandidate.set(
        a.candidateKey,
        a.enrolled ? { enrolled: true, variant: a.variant } : { enrolled: false, reason: a.reason ?? 'not enrolled' },
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
      throw this.refused(response.status, await boundedText(response));
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => undefined);
      throw new TransientError(`experiment service answered ${response.status}`);
    }
    const body = await answer(response, ExperimentAnswerBody, 'experiment');
    return body.variants.filter((v) => v.weight > 0).map((v) => v.name);
  }
}

/**
 * A 2xx answer's body, bounded (MAX_ANSWER_BYTES) and checked against `schema`. One that is too large,
 * not JSON or not of the documented shape is the service's fault, not the request's: transient, so the
 * request waits and retries (and is dead-lettered as TRANSIENT_EXHAUSTED past the cap), never planned
 * from a guess.
 */
async function answer<S extends TSchema>(response: Response, schema: S, what: string): Promise<Static<S>> {
  const read = await readBoundedJson(response, MAX_ANSWER_BYTES).catch((error: unknown) => {
    throw new TransientError(`experiment service's ${what} answer failed mid-body: ${(error as Error).message}`);
  });
  if (!read.ok)
    throw new TransientError(
      read.problem === 'too_large'
        ? `experiment service's ${what} answer is over ${MAX_ANSWER_BYTES} bytes`
        : `experiment service's ${what} answer is not JSON`,
      { code: 'PEER_BAD_ANSWER' },
    );
  if (!Value.Check(schema, read.value))
    throw new TransientError(`experiment service's ${what} answer is not of the documented shape`, {
      code: 'PEER_BAD_ANSWER',
    });
  return read.value;
}
