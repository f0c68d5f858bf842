/**
 * The verdict on one scenario: the SMTP sink's deliveries against the sender's sent log, never against
 * the suite's own expectations. Pure: the run collects the inputs.
 *
 *   duplicates  emails delivered more than once for one send or one campaign+address(+step): must be 0
 *   lost        requests without a terminal outcome in the sent log: must be 0
 *   ambiguous   sends whose provider call may or may not have happened: at most the sends in flight
 *               at the faults, plus the connections the SMTP server cut after it had the message;
 *               none where the provider reports every message it takes (delivery evidence settles
 *               each send in doubt, or its absence licenses the retry)
 *   evidence    delivery evidence a provider would send that the sender refused, and forged evidence
 *               it trusted (forged-evidence.ts): both must be 0
 *   mismatched  `sent` rows with no delivery, or deliveries recorded as failed, suppressed or not at all: 0
 */
import type { DeliveredMessage } from '@outreach/testkit';

/** The sent log's final states: a send in any other is still on its way. */
export const TERMINAL: ReadonlySet<string> = new Set(['sent', 'failed', 'suppressed', 'ambiguous']);

export interface SentRow {
  readonly sendId: string;
  readonly status: string;
  readonly reason?: string | null;
}

export interface Evidence {
  /** The sendIds the requests map to. */
  readonly expected: ReadonlySet<string>;
  readonly log: readonly SentRow[];
  readonly deliveries: readonly DeliveredMessage[];
  /** What the scenario's faults could have caught mid-send. */
  readonly inFlightAtFaults: number;
  /** Connections the SMTP server cut after it had the message. */
  readonly cut: number;
  /**
   * What one email may exist once for: by default the campaign and the address (one step per
   * campaign); a run with several steps adds the step.
   */
  readonly slotOf?: (delivery: DeliveredMessage) => string;
  /** The provider reports every message it takes (PROVIDER_LOOKUP=evidence): no send may stay ambiguous. */
  readonly evidenceSettles?: boolean;
  /** Evidence reports the sender refused (4xx), in words: each is a violation. */
  readonly evidenceRefused?: readonly string[];
  /** Forged evidence the sender trusted (not refused, or verified), in words: each is a violation. */
  readonly forgeriesTrusted?: readonly string[];
}

export interface Verdict {
  /** Sends by status. */
  readonly outcomes: Record<string, number>;
  readonly duplicates: number;
  readonly lost: number;
  readonly ambiguous: number;
  readonly ambiguousBound: number;
  readonly mismatched: number;
  /** Each broken guarantee, in words; none when the scenario passes. */
  readonly violations: readonly string[];
}

const campaignAndAddress = (m: DeliveredMessage) =>
  `${m.headers.get('x-outreach-campaign')}|${m.to.join(',').toLowerCase()}`;

export function judge({
  expected,
  log,
  deliveries,
  inFlightAtFaults,
  cut,
  slotOf = campaignAndAddress,
  evidenceSettles = false,
  evidenceRefused = [],
  forgeriesTrusted = [],
}: Evidence): Verdict {
  const bySendId = new Map(log.map((r) => [r.sendId, r]));
  const perMessageId = new Map<string, number>();
  const perSlot = new Map<string, number>();
  for (const m of deliveries) {
    perMessageId.set(m.messageId ?? '', (perMessageId.get(m.messageId ?? '') ?? 0) + 1);
    const slot = slotOf(m);
    perSlot.set(slot, (perSlot.get(slot) ?? 0) + 1);
  }
  const duplicates =
    [...perMessageId.values()].reduce((n, c) => n + Math.max(0, c - 1), 0) +
    [...perSlot.values()].reduce((n, c) => n + Math.max(0, c - 1), 0);
  const lost = [...expected].filter((id) => !TERMINAL.has(bySendId.get(id)?.status ?? '')).length;
  const unexpectedRows = log.filter((r) => !expected.has(r.sendId)).length;
  // `<sendId.keyId.mac@domain>` (ADR 012), or `<sendId@domain>` from before.
  const sendIdOf = (messageId: string | undefined) => /^<([0-9a-f-]{36})[.@]/.exec(messageId ?? '')?.[1] ?? '';
  const delivered = new Set(deliveries.map((m) => sendIdOf(m.messageId)));
  const sentUndelivered = log.filter((r) => r.status === 'sent' && !delivered.has(r.sendId)).length;
  const deliveredUnsent = [...delivered].filter(
    (id) => !['sent', 'ambiguous'].includes(bySendId.get(id)?.status ?? ''),
  ).length;
  const outcomes: Record<string, number> = {};
  for (const r of log) outcomes[r.status] = (outcomes[r.status] ?? 0) + 1;
  const ambiguous = outcomes.ambiguous ?? 0;
  const ambiguousBound = evidenceSettles ? 0 : inFlightAtFaults + cut;
  const violations = [
    duplicates > 0 && `${duplicates} duplicate deliveries`,
    lost > 0 && `${lost} requests without a terminal outcome`,
    unexpectedRows > 0 && `${unexpectedRows} sends that match no request`,
    ambiguous > ambiguousBound &&
      (evidenceSettles
        ? `${ambiguous} ambiguous sends left, though the provider reports every message it takes`
        : `${ambiguous} ambiguous sends, more than the ${ambiguousBound} in flight at the faults or cut by the server`),
    evidenceRefused.length > 0 &&
      `${evidenceRefused.length} delivery evidence reports refused by the sender (${evidenceRefused.slice(0, 3).join('; ')})`,
    forgeriesTrusted.length > 0 &&
      `${forgeriesTrusted.length} forged delivery evidence reports trusted (${forgeriesTrusted.slice(0, 3).join('; ')})`,
    sentUndelivered > 0 && `${sentUndelivered} sends recorded as sent that the SMTP sink never received`,
    deliveredUnsent > 0 && `${deliveredUnsent} deliveries recorded as failed, suppressed or not at all`,
  ].filter((v): v is string => typeof v === 'string');
  return {
    outcomes,
    duplicates,
    lost,
    ambiguous,
    ambiguousBound,
    mismatched: sentUndelivered + deliveredUnsent,
    violations,
  };
}
