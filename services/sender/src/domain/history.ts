/**
 * The rules of a provider-history import (cli/backfill.ts), pure: how a CSV record becomes a
 * delivery with the live path's canonical keys, which lines are refused, and how the import is named.
 *
 * - A row's step is its `step` column, else `--step`. With `--step S`, a step column naming another
 *   step refuses the whole import (the file is not the step the operator said it was), every such
 *   line listed.
 * - A (campaign, step) the sender knows the campaign never had refuses the import too, listed by
 *   line, unless `--allow-new-steps`: a typo in a step column would otherwise become a new step
 *   whose history blocks nothing. A campaign the sender has never seen is new as a whole
 *   (pre-platform history), and all its steps are accepted.
 * - Other bad lines (no address, no date) are skipped and reported, as before: they cannot be
 *   imported, and refusing the rest for them would leave the good history out too.
 * - A row whose Message-ID is ours (`<sendId.keyId.mac@MESSAGE_ID_DOMAIN>`, or the bare
 *   `<sendId@MESSAGE_ID_DOMAIN>` of mail sent before ADR 012) is that live send's delivery: it is
 *   matched by the id, never counted as a second delivery, and settles the send if it is ambiguous.
 *   The id is read by its shape, its MAC not checked: the file is the operator's export of what the
 *   provider sent for us, not something an outsider wrote (the backfill holds no identifier key).
 * - The import's id derives from the file's bytes: the same file again finds its import.
 * Problems name fields, never values (the file holds addresses).
 */
import {
  canonicalAddress,
  canonicalCampaignId,
  canonicalStep,
  candidateKeyFor,
  emailHash,
  idProblem,
  uuidV5,
  type EmailHashKey,
} from '@outreach/contracts';

export interface HistoryOptions {
  /** `--step`, canonical: the step of rows without one, and the only step a step column may name. */
  readonly step?: string;
  /** `--campaign`, canonical: the campaign of rows without one. */
  readonly campaign?: string;
  /** The domain of the sender's deterministic Message-IDs. */
  readonly messageIdDomain: string;
}

export interface HistoryRow {
  readonly line: number;
  readonly campaignId: string;
  /** The address as mailed (canonical), and its identity form. */
  readonly email: string;
  readonly emailNorm: string;
  readonly emailHash: string;
  readonly step: string;
  /** From the file's candidate_id; null when it has none (the address stands in). */
  readonly candidateKey: string | null;
  readonly providerMessageId: string | null;
  readonly sentAt: Date;
  /** The live send this delivery is, when its Message-ID is one of ours. */
  readonly sendId: string | null;
}

export type HistoryLine =
  | { readonly kind: 'row'; readonly row: HistoryRow }
  | { readonly kind: 'invalid'; readonly line: number; readonly problems: readonly string[] }
  /** The step column names another step than `--step`. */
  | { readonly kind: 'step_mismatch'; readonly line: number };

const pick = (record: Readonly<Record<string, string>>, ...names: string[]): string | undefined => {
  for (const name of names) {
    const value = record[name]?.trim();
    if (value) return value;
  }
  return undefined;
};

// The sendId, alone (before ADR 012) or followed by `.keyId.mac`.
const OURS =
  /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:\.[a-z0-9][a-z0-9-]{0,15}\.[0-9a-f]{32})?$/;

/** The sendId in one of our Message-IDs (brackets optional, either form), else null. */
export function sendIdOfMessageId(messageId: string | undefined, domain: string): string | null {
  if (!messageId) return null;
  const bare = messageId.trim().replace(/^<(.*)>$/, '$1');
  const at = bare.lastIndexOf('@');
  if (at < 0 || bare.slice(at + 1).toLowerCase() !== domain.toLowerCase()) return null;
  return OURS.exec(bare.slice(0, at).toLowerCase())?.[1] ?? null;
}

/** One CSV record (header names lower-cased), at file line `line`. */
export function historyLine(
  record: Readonly<Record<string, string>>,
  line: number,
  options: HistoryOptions,
  hashKey: EmailHashKey,
): HistoryLine {
  const email = pick(record, 'recipient', 'email', 'to');
  const address = email ? canonicalAddress(email) : null;
  const rawCampaign = pick(record, 'campaign', 'campaign_id');
  const campaignId = rawCampaign ? canonicalCampaignId(rawCampaign) : options.campaign;
  const fileStep = pick(record, 'step');
  const step = fileStep ? canonicalStep(fileStep) : options.step;
  const timestamp = pick(record, 'timestamp', 'sent_at', 'date');
  const sentAt = timestamp ? new Date(timestamp) : undefined;
  const problems = [
    !address ? 'recipient is not an address' : undefined,
    !campaignId ? 'no campaign (column or --campaign)' : idProblem('campaign', campaignId),
    !step ? 'no step (column or --step)' : idProblem('step', step),
    !sentAt || Number.isNaN(sentAt.getTime()) ? 'timestamp is missing or not a date' : undefined,
  ].filter((p): p is string => typeof p === 'string');
  if (problems.length > 0) return { kind: 'invalid', line, problems };
  if (options.step !== undefined && step !== options.step) return { kind: 'step_mismatch', line };
  const candidate = pick(record, 'candidate_id', 'candidate');
  const { address: canonical, norm } = address as NonNullable<typeof address>;
  const providerMessageId = pick(record, 'provider_message_id', 'message_id') ?? null;
  const sendId =
    sendIdOfMessageId(pick(record, 'message_id'), options.messageIdDomain) ??
    sendIdOfMessageId(pick(record, 'provider_message_id'), options.messageIdDomain);
  return {
    kind: 'row',
    row: {
      line,
      campaignId: campaignId as string,
      email: canonical,
      emailNorm: norm,
      emailHash: emailHash(norm, hashKey),
      step: step as string,
      candidateKey: candidate ? candidateKeyFor(candidate, hashKey) : null,
      providerMessageId,
      sentAt: sentAt as Date,
      sendId,
    },
  };
}

/** The campaign steps an import names, with the lines that name each (the first few). */
export class StepsSeen {
  private readonly seen = new Map<string, { campaignId: string; step: string; lines: number[]; count: number }>();

  constructor(private readonly linesKept = 20) {}

  add(row: Pick<HistoryRow, 'campaignId' | 'step' | 'line'>): void {
    const key = `${row.campaignId}\u0000${row.step}`;
    const entry = this.seen.get(key) ?? { campaignId: row.campaignId, step: row.step, lines: [], count: 0 };
    if (entry.lines.length < this.linesKept) entry.lines.push(row.line);
    entry.count++;
    this.seen.set(key, entry);
  }

  get campaigns(): string[] {
    return [...new Set([...this.seen.values()].map((e) => e.campaignId))].sort();
  }

  /**
   * The steps refused against what the sender knows of each campaign (its steps so far, from live
   * sends and earlier imports): a known campaign's unknown step, unless new steps are allowed.
   */
  unknownSteps(
    known: ReadonlyMap<string, ReadonlySet<string>>,
    allowNewSteps: boolean,
  ): Array<{ campaignId: string; step: string; lines: readonly number[]; count: number }> {
    if (allowNewSteps) return [];
    return [...this.seen.values()]
      .filter((e) => known.has(e.campaignId) && !known.get(e.campaignId)?.has(e.step))
      .sort((a, b) => (a.lines[0] ?? 0) - (b.lines[0] ?? 0));
  }
}

/** The import's id: the same bytes are the same import, whoever runs it and when. */
export function importIdOf(contentSha256: string): string {
  return uuidV5('sender-provider-history', contentSha256);
}

/** `--step`/`--campaign` as given, canonical; an id that holds an address is refused (as at every ingress). */
export function optionProblem(name: 'step' | 'campaign', value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const canonical = name === 'step' ? canonicalStep(value) : canonicalCampaignId(value);
  return canonical === '' ? `--${name} is empty` : idProblem(name, canonical);
}
