/**
 * Re-requests made audible: a request for a step already emitted or cancelled plans nothing
 * (domain/step.ts `arrivalOf`), and before issue #18 nobody heard it, seed 003's silent drop one
 * level up. Each is counted (`outreach_planner_rerequests_total{state,ingress}`) and logged as a warning;
 * over HTTP it is also answered with a 409. A repeat of the same request is not a re-request.
 */
import { counter, type Counter, type Logger, type Registry } from '@outreach/shared';

export interface Rerequest {
  readonly state: 'emitted' | 'cancelled';
  /** Where the request came from: `http`, the `kafka` topic, or a `sequence` reaching its follow-up. */
  readonly ingress: 'http' | 'kafka' | 'sequence';
  readonly campaignId: string;
  readonly step: string;
  readonly requestId: string;
}

export class Rerequests {
  private readonly counter: Counter;

  constructor(
    registry: Registry,
    private readonly logger: Logger,
  ) {
    this.counter = counter(registry, 'outreach_planner_rerequests_total');
  }

  report(rerequests: readonly Rerequest[]): void {
    for (const { state, ingress, campaignId, step, requestId } of rerequests) {
      this.counter.inc({ state, ingress });
      // Ids only (each refused at the ingress if it held an address), never the address or content.
      this.logger.warn(
        { rerequest: state, ingress, campaignId, step, requestId },
        `a step already ${state} was requested again: nothing planned`,
      );
    }
  }
}
