/**
 * Why a request was refused, as the system that sent it hears it (`OutreachRejected` on
 * `outreach.rejected.v1`, and the status route): a code from a closed list, and a detail made only
 * of the platform's own words and the request's field names. Never a value the request carried: the
 * topic is for publishers, and any value (an id, a subject, a variant) may hold an address or a name.
 * The field names are those of OutreachRequested.avsc, so a problem text that quotes something else
 * loses that word rather than leaking it.
 * Pure: the database clock (`now`) comes in as a value.
 */
import { exactIdProblem, schemaDefinitions, uuidV5, type OutreachRejected } from '@outreach/contracts';

export type RejectionReason = OutreachRejected['reason'];

/** The closed list of reason codes, as OutreachRejected.avsc declares them (no copy to drift). */
export const REJECTION_REASONS = (
  (
    schemaDefinitions.OutreachRejected.current as { fields: ReadonlyArray<{ name: string; type: unknown }> }
  ).fields.find((field) => field.name === 'reason')?.type as { symbols: readonly RejectionReason[] }
).symbols;

export interface RequestRejection {
  readonly reason: RejectionReason;
  readonly detail: string;
  /** The send that holds the step, for a step already emitted or cancelled. */
  readonly sendId: string | null;
}

/** The request an OutreachRejected answers: what of it may travel (its ids, never its contents). */
export interface RefusedRequest {
  readonly requestId: string;
  /** The request event's id; it becomes the rejection's causationId when it is a UUID. */
  readonly eventId: string;
  /** Already a plain token (canonicalCorrelationId), as every ingress makes it. */
  readonly correlationId: string;
}

interface AvroField {
  readonly name: string;
  readonly type: unknown;
}

/** OutreachRequested's field names: the top-level ones, and every name at any depth. */
function fieldNames(): { top: Set<string>; all: Set<string> } {
  const top = new Set<string>();
  const all = new Set<string>();
  const walk = (type: unknown, depth: number): void => {
    if (Array.isArray(type)) return type.forEach((branch) => walk(branch, depth));
    if (typeof type !== 'object' || type === null) return;
    const node = type as { type?: unknown; items?: unknown; fields?: readonly AvroField[] };
    if (node.type === 'array') return walk(node.items, depth);
    for (const field of node.fields ?? []) {
      if (depth === 0) top.add(field.name);
      all.add(field.name);
      walk(field.type, depth + 1);
    }
  };
  walk(schemaDefinitions.OutreachRequested.current, 0);
  return { top, all };
}

const FIELDS = fieldNames();
/** `contents[0].subject`, `followUps[2]`, `email`: names and small indexes, nothing else. */
const PATH = /[A-Za-z]+(?:\[\d{1,3}\])?(?:\.[A-Za-z]+(?:\[\d{1,3}\])?)*/g;
const MAX_FIELDS = 8;

/** `path` when it is a field path of OutreachRequested (top-level first segment, known names), else null. */
export function fieldPath(path: string): string | null {
  const segments = path.split('.').map((segment) => segment.replace(/\[\d{1,3}\]$/, ''));
  if (!new RegExp(`^${PATH.source}$`).test(path)) return null;
  if (!FIELDS.top.has(segments[0] as string)) return null;
  return segments.every((segment) => FIELDS.all.has(segment)) ? path : null;
}

/**
 * The request fields the problems name (validateRequest's and canonicalSendKeys's texts, which name
 * fields), in order and once each. A problem scoped to a follow-up (`followUps[1]: contents[0]...`)
 * names the path inside it. Words that are not field names, and any value, are dropped.
 */
export function fieldsNamed(problems: readonly string[]): string[] {
  const found: string[] = [];
  for (const problem of problems) {
    const scoped = /^\s*(followUps\[\d{1,3}\]):\s*(.*)$/s.exec(problem);
    const [scope, text] = scoped ? [`${scoped[1]}.`, scoped[2] as string] : ['', problem];
    for (const match of text.matchAll(PATH)) {
      const path = fieldPath(`${scope}${match[0]}`) ?? (scope ? null : fieldPath(match[0]));
      if (path !== null && !found.includes(path)) found.push(path);
    }
    if (scope && !found.some((path) => path.startsWith(scope))) found.push(scope.slice(0, -1));
  }
  return found;
}

/** A JSON pointer into the body (`/contents/0/subject`) as a field path (`contents[0].subject`). */
export function pointerPath(pointer: string): string {
  return pointer
    .split('/')
    .filter((segment) => segment !== '')
    .reduce(
      (path, segment) => (/^\d+$/.test(segment) ? `${path}[${segment}]` : path ? `${path}.${segment}` : segment),
      '',
    );
}

/** One schema validation error of the HTTP body, as fastify's validator reports it. */
export interface BodyValidationError {
  readonly instancePath: string;
  readonly keyword: string;
  readonly params: Readonly<Record<string, unknown>>;
}

/**
 * The fields a body's schema errors are about: where each failed, and the missing property a
 * `required` error names (a schema name). An unknown property's own name is the caller's and is
 * not repeated: its parent is named instead.
 */
export function fieldsOfValidation(errors: readonly BodyValidationError[]): string[] {
  return errors.flatMap((error) => {
    const at = pointerPath(error.instancePath);
    const missing = error.keyword === 'required' ? error.params.missingProperty : undefined;
    const path = typeof missing === 'string' ? (at ? `${at}.${missing}` : missing) : at;
    return fieldPath(path) ?? [];
  });
}

/** A request that breaks its rules: the fields at fault, by name only. */
/**
 * A request made before its person's erasure (ADR 014) and read from the topic after it: not planned,
 * so nothing of the person is stored or sent on. Told as invalid_request (the closed list has no code
 * for it; a code of its own is a schema change), in the platform's words only.
 */
export function erasedSubjectRequest(): RequestRejection {
  return {
    reason: 'invalid_request',
    detail: 'the candidate was erased (a data-subject request) after this request was made: not planned',
    sendId: null,
  };
}

export function invalidRequest(fields: readonly string[]): RequestRejection {
  const named = fields.flatMap((field) => fieldPath(field) ?? []);
  const shown = [...new Set(named)].slice(0, MAX_FIELDS);
  const more = new Set(named).size > shown.length ? ', ...' : '';
  return {
    reason: 'invalid_request',
    detail: shown.length > 0 ? `fields: ${shown.join(', ')}${more}` : 'the request does not meet the request rules',
    sendId: null,
  };
}

/** Content missing for what the experiment decided; `at` is where (`contents` or `followUps[i].contents`). */
export function contentMissing(
  reason: 'no_content_for_variant' | 'no_default_content',
  at: string = 'contents',
): RequestRejection {
  const where = fieldPath(at) ?? 'contents';
  return {
    reason,
    detail:
      reason === 'no_content_for_variant'
        ? `${where}: no content for a variant of the experiment, and none without a variant`
        : `${where}: the candidate is not enrolled in the experiment, and no content is without a variant`,
    sendId: null,
  };
}

/** The experiment service refused the ids it was given for the request (a 400): not plannable as sent. */
export const experimentRefused: RequestRejection = {
  reason: 'invalid_request',
  detail: 'the experiment service refused the experimentId or candidateId',
  sendId: null,
};

/**
 * The planner failed on the request for good (no retry would help; the record is dead-lettered):
 * told in words of the platform only, since the failure's own text may quote a value.
 */
export const requestUnprocessable: RequestRejection = {
  reason: 'invalid_request',
  detail: 'the planner could not process the request; it was dead-lettered for an operator',
  sendId: null,
};

export const unknownExperiment: RequestRejection = {
  reason: 'unknown_experiment',
  detail: 'experimentId names no experiment',
  sendId: null,
};

/** A request for a step another request already had emitted, or that was cancelled: nothing was planned. */
export function stepTaken(state: 'emitted' | 'cancelled', sendId: string): RequestRejection {
  return {
    reason: state === 'emitted' ? 'step_already_emitted' : 'step_already_cancelled',
    detail:
      state === 'emitted'
        ? 'the step was already emitted for another request: nothing was planned'
        : 'the step was already cancelled (a reply or a close): nothing was planned',
    sendId,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether a rejection can be addressed to this request id: one that is no valid id (empty, overlong
 * in characters or bytes, an address, whitespace at its ends, control characters) cannot. The exact
 * id is checked, as it would be the event's key: never a trimmed copy.
 */
export function addressable(requestId: string): boolean {
  return exactIdProblem('requestId', requestId) === undefined;
}

/**
 * The OutreachRejected for a refused request, or null when its requestId cannot travel (missing,
 * overlong, control characters, an at-sign: it may be an address) and there is nothing safe to key
 * it by: such a request is only dead-lettered (Kafka) or answered (HTTP). The id derives from the
 * request id and the rejection, so a redelivery, a retried POST or a second refusal for the same
 * reason is the same event.
 */
export function outreachRejected(
  request: RefusedRequest,
  rejection: RequestRejection,
  now: number,
): OutreachRejected | null {
  if (!addressable(request.requestId)) return null;
  return {
    type: 'OutreachRejected',
    eventId: uuidV5('outreach-rejected', request.requestId, rejection.reason, rejection.detail),
    occurredAt: now,
    producer: 'planner',
    correlationId: request.correlationId,
    causationId: UUID.test(request.eventId) ? request.eventId : null,
    requestId: request.requestId,
    reason: rejection.reason,
    detail: rejection.detail,
    sendId: rejection.sendId,
  };
}
