/**
 * What an outreach request must satisfy, normalized once, here at the edge: campaign, step,
 * candidate and address keys in their canonical forms, ids free of addresses and a correlation id
 * that may travel (canonicalSendKeys in @outreach/shared, the same function every ingress uses),
 * content per variant (covering every variant of the experiment), follow-up steps; and the content
 * each candidate gets.
 * Pure: the experiment's answer and the emailHash key come in as values.
 */
import {
  canonicalConversationId,
  canonicalSendKeys,
  canonicalStep,
  hasControlCharacters,
  idProblem,
  MAX_CONVERSATION_ID_BYTES,
  MAX_EXPERIMENT_ID_CHARS,
  utf8Bytes,
  type EmailHashKey,
  type OutreachRequested,
} from '@outreach/contracts';
import { fieldsNamed } from './rejection.js';

export const MAX_BODY_BYTES = 100_000;
export const MAX_SUBJECT_CHARS = 998;

export interface Content {
  readonly variant: string | null;
  readonly subject: string;
  readonly body: string;
}

export interface FollowUp {
  readonly step: string;
  readonly delayMs: number;
  readonly contents: readonly Content[];
}

export interface PlannedRequest {
  readonly requestId: string;
  readonly requestEventId: string;
  readonly correlationId: string;
  readonly campaignId: string;
  readonly candidateId: string;
  readonly candidateKey: string;
  readonly conversationId: string;
  readonly email: string;
  readonly emailNorm: string;
  readonly step: string;
  readonly sendId: string;
  readonly experimentId: string | null;
  readonly contents: readonly Content[];
  readonly sendAt: number | null;
  readonly followUps: readonly FollowUp[];
}

function contentProblems(contents: readonly Content[], where: string, experiment: boolean): string[] {
  const problems: string[] = [];
  if (contents.length === 0) problems.push(`${where}: contents are empty`);
  const variants = contents.map((c) => c.variant);
  if (new Set(variants).size !== variants.length) problems.push(`${where}: two contents for the same variant`);
  if (!experiment && contents.some((c) => c.variant !== null))
    problems.push(`${where}: contents name variants but the request has no experimentId`);
  contents.forEach((content, i) => {
    if (content.variant !== null && content.variant.length > MAX_EXPERIMENT_ID_CHARS)
      problems.push(`${where}: contents[${i}].variant is longer than ${MAX_EXPERIMENT_ID_CHARS} characters`);
    if (content.subject.trim() === '') problems.push(`${where}: contents[${i}].subject is empty`);
    if (hasControlCharacters(content.subject))
      problems.push(`${where}: contents[${i}].subject contains line breaks or control characters (header injection)`);
    if (content.subject.length > MAX_SUBJECT_CHARS)
      problems.push(`${where}: contents[${i}].subject is longer than ${MAX_SUBJECT_CHARS} characters`);
    if (content.body.trim() === '') problems.push(`${where}: contents[${i}].body is empty`);
    if (Buffer.byteLength(content.body, 'utf8') > MAX_BODY_BYTES)
      problems.push(`${where}: contents[${i}].body is larger than ${MAX_BODY_BYTES} bytes`);
  });
  return problems;
}

/** A refusal names its reason (for logs and the DLQ) and the fields at fault (for OutreachRejected). */
export type Validation =
  | { readonly ok: true; readonly request: PlannedRequest }
  | { readonly ok: false; readonly reason: string; readonly fields: readonly string[] };

export function validateRequest(event: Omit<OutreachRequested, 'type'>, hashKey: EmailHashKey): Validation {
  const problems: string[] = [];
  const keys = canonicalSendKeys(event, hashKey);
  if (!keys.ok) problems.push(...keys.problems);
  const experiment = event.experimentId !== null;
  // The experiment service's own bound (it answers 400 to a longer id): refused here, with a reason.
  if (event.experimentId !== null && event.experimentId.length > MAX_EXPERIMENT_ID_CHARS)
    problems.push(`experimentId is longer than ${MAX_EXPERIMENT_ID_CHARS} characters`);
  // A btree key (the planner's conversation indexes): bounded in bytes, in the form that is stored.
  if (
    event.conversationId !== null &&
    utf8Bytes(canonicalConversationId(event.conversationId)) > MAX_CONVERSATION_ID_BYTES
  )
    problems.push(`conversationId is longer than ${MAX_CONVERSATION_ID_BYTES} bytes in UTF-8`);
  problems.push(...contentProblems(event.contents, 'request', experiment));
  // Distinct after canonicalization: `Follow-Up` and `follow-up` would be one send slot.
  const steps = [event.step, ...event.followUps.map((f) => f.step)].map(canonicalStep);
  if (new Set(steps).size !== steps.length)
    problems.push('follow-up steps must differ from each other and from the step');
  event.followUps.forEach((followUp, i) => {
    const stepProblem = idProblem(`followUps[${i}].step`, canonicalStep(followUp.step));
    if (stepProblem) problems.push(stepProblem);
    if (!(followUp.delayMs > 0)) problems.push(`followUps[${i}].delayMs must be positive`);
    problems.push(...contentProblems(followUp.contents, `followUps[${i}]`, experiment));
  });
  if (problems.length > 0 || !keys.ok)
    return { ok: false, reason: `invalid OutreachRequested: ${problems.join('; ')}`, fields: fieldsNamed(problems) };
  const { campaignId, candidateKey, step, email, emailNorm, sendId, correlationId, conversationId } = keys.keys;
  return {
    ok: true,
    request: {
      requestId: event.requestId,
      requestEventId: event.eventId,
      correlationId,
      campaignId,
      candidateId: event.candidateId,
      candidateKey,
      // Given ids in their canonical form (canonicalConversationId), so every event of the conversation carries one spelling.
      conversationId: conversationId ?? `${campaignId}:${candidateKey}`,
      email,
      emailNorm,
      step,
      sendId,
      experimentId: event.experimentId,
      contents: event.contents,
      sendAt: event.sendAt,
      followUps: event.followUps.map((followUp) => ({ ...followUp, step: canonicalStep(followUp.step) })),
    },
  };
}

/** Why content could not be chosen: none for the candidate's variant, or none for a candidate without one. */
export type ContentProblem = 'no_content_for_variant' | 'no_default_content';

/** The experiment's verdict for one candidate, as the planner receives it. */
export type VariantDecision =
  { readonly enrolled: true; readonly variant: string } | { readonly enrolled: false; readonly reason: string };

/**
 * The content a candidate gets: the one for its sticky variant (or the request's variant-less content,
 * shared by all arms); a candidate not enrolled gets the variant-less content. Never a random pick.
 */
export function chooseContent(
  contents: readonly Content[],
  decision: VariantDecision | null,
): { ok: true; content: Content; variant: string | null } | { ok: false; reason: string; code: ContentProblem } {
  if (decision === null) {
    const single = contents.find((c) => c.variant === null) ?? (contents.length === 1 ? contents[0] : undefined);
    return single
      ? { ok: true, content: single, variant: null }
      : { ok: false, reason: 'no content without a variant', code: 'no_default_content' };
  }
  if (decision.enrolled) {
    // The variant's own content, else the shared variant-less one (the step is the same for both
    // arms); the send still carries the candidate's variant, so exposure stays consistent.
    const content = contents.find((c) => c.variant === decision.variant) ?? contents.find((c) => c.variant === null);
    return content
      ? { ok: true, content, variant: decision.variant }
      : {
          ok: false,
          reason: `request has no content for the assigned variant ${decision.variant}`,
          code: 'no_content_for_variant',
        };
  }
  const fallback = contents.find((c) => c.variant === null);
  return fallback
    ? { ok: true, content: fallback, variant: null }
    : {
        ok: false,
        reason: `candidate is not enrolled (${decision.reason}) and the request has no default content`,
        code: 'no_default_content',
      };
}

export const UNKNOWN_EXPERIMENT = 'unknown experiment: experimentId names no experiment';

/**
 * Whether every variant of the experiment (null: there is no such experiment) would find content:
 * the choice chooseContent makes for a candidate enrolled in each, checked before a request is
 * accepted, so one that could not serve an arm is refused up front rather than dead-lettered later.
 */
export function variantCoverage(
  contents: readonly Content[],
  variants: readonly string[] | null,
): { ok: true } | { ok: false; reason: string; code: 'unknown_experiment' | 'no_content_for_variant' } {
  if (variants === null) return { ok: false, reason: UNKNOWN_EXPERIMENT, code: 'unknown_experiment' };
  const missing = variants.filter((variant) => !chooseContent(contents, { enrolled: true, variant }).ok);
  return missing.length === 0
    ? { ok: true }
    : {
        ok: false,
        reason: `no content for variant(s) ${missing.join(', ')} of the experiment (and no content without a variant)`,
        code: 'no_content_for_variant',
      };
}
