/**
 * The demo's workload (scripts/demo.ts), which the container test (test/container/) also drives
 * through the image: two campaigns, the first an A/B test on the subject line with a follow-up step,
 * a suppressed and a bouncing address in the second; and repeats of the same requests, every 10th as
 * published again and every 20th with its address in upper case and padded with spaces.
 */
import { randomUUID } from 'node:crypto';
import { type OutreachRequested } from '@outreach/contracts';
import { outreachRequest } from './stack.js';

/** The experiment the first campaign runs (POST /v1/experiments of the experiment service). */
export const DEMO_EXPERIMENT = {
  experimentId: 'subject-line',
  variants: [
    { name: 'short', weight: 1 },
    { name: 'personal', weight: 1 },
  ],
};
/** Put on the sender's suppression list before the workload: its request ends `suppressed`. */
export const SUPPRESSED_ADDRESS = 'unsubscribed@example.com';
/** An SMTP sink that rejects this address makes its request end `failed`. */
export const BOUNCING_ADDRESS = 'bounce@example.com';

export interface DemoWorkload {
  /** One per candidate. */
  readonly requests: readonly OutreachRequested[];
  /** The first `backend` requests are the A/B campaign's, with a follow-up. */
  readonly backend: number;
  /** The same requests again, as other systems repeat them. */
  readonly repeats: readonly OutreachRequested[];
  readonly caseVariants: readonly OutreachRequested[];
}

export function demoWorkload(
  candidates: number,
  options: { readonly producer: string; readonly followUpDelayMs: number; readonly requestId?: (i: number) => string },
): DemoWorkload {
  const backend = Math.round(candidates * 0.6);
  const requests = Array.from({ length: candidates }, (_, i) => {
    const inBackend = i < backend;
    const candidateId = `cand-${i}`;
    const email =
      i === backend + 7 ? SUPPRESSED_ADDRESS : i === backend + 11 ? BOUNCING_ADDRESS : `candidate${i}@example.com`;
    return outreachRequest(
      {
        requestId: options.requestId?.(i) ?? `${candidateId}-intro`,
        campaignId: inBackend ? 'backend-engineers' : 'product-designers',
        candidateId,
        email,
        experimentId: inBackend ? DEMO_EXPERIMENT.experimentId : null,
        contents: inBackend
          ? [
              { variant: 'short', subject: 'Quick question', body: 'Are you open to a backend role?' },
              {
                variant: 'personal',
                subject: `Hi ${candidateId}, your work caught our eye`,
                body: 'We loved your open-source work.',
              },
            ]
          : [{ variant: null, subject: 'A design role for you', body: 'Would you like to hear more?' }],
        followUps: inBackend
          ? [
              {
                step: 'follow-up',
                delayMs: options.followUpDelayMs,
                contents: [{ variant: null, subject: 'Following up', body: 'Any thoughts?' }],
              },
            ]
          : [],
      },
      options.producer,
    );
  });
  return {
    requests,
    backend,
    repeats: requests.filter((_, i) => i % 10 === 0).map((r) => ({ ...r, eventId: randomUUID() })),
    caseVariants: requests
      .filter((_, i) => i % 20 === 5)
      .map((r) => ({ ...r, eventId: randomUUID(), email: `  ${r.email.toUpperCase()} ` })),
  };
}
