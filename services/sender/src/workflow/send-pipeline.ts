/**
 * Drives sends through the state machine of domain/send.ts (README): claim → checks → fence → send
 * → record (+ outbox), for a chunk of SendRequested from Kafka, and for claims the reconciler
 * re-drives. The provider's verdict becomes an event through `outcomeOf`; the repository applies it.
 */
import {
  counter,
  gauge,
  histogram,
  type BatchContext,
  type ConsumedEvent,
  type Logger,
  type Registry,
  type Rejection,
  GroupCommit,
  isTransientError,
  withCause,
} from '@outreach/shared';
import { type EmailHashKey, type SendRequested } from '@outreach/contracts';
import pLimit from 'p-limit';
import type { MailMessage, MailProvider, SendResult } from '../adapters/providers/port.js';
import type { CampaignsRepository } from '../adapters/campaigns-repository.js';
import type { SendRow } from '../adapters/send-rows.js';
import type { Claim, FenceResult, FreshClaim, RecordEntry, SendsRepository } from '../adapters/sends-repository.js';
import type { ProviderAttempt, SharedErrorWindow, SharedRateLimiter } from '../adapters/incident-controls.js';
import { autoPauseReason, type ErrorRatePolicy } from '../domain/error-rate.js';
import { recipientDomain } from '../domain/rate-limit.js';
import { validateSendRequest, type ValidSend } from '../domain/request.js';
import { outcomeOf, verdictWaitMs, type OutcomePolicy, type ResultEvent } from '../domain/send.js';
import type { SendIdentifiers } from '../domain/identifiers.js';
import { SendCommands } from './send-commands.js';

export interface SendPipelineOptions {
  readonly repository: SendsRepository;
  /** Where auto-pause pauses a campaign. */
  readonly campaigns: Pick<CampaignsRepository, 'autoPause'>;
  /** The send rate, global and per recipient domain, shared by every replica (PostgreSQL). */
  readonly rateLimiter: Pick<SharedRateLimiter, 'take' | 'close'>;
  /** The auto-pause window, shared by every replica and kept across restarts (PostgreSQL). */
  readonly errorWindow: Pick<SharedErrorWindow, 'record' | 'reset'>;
  readonly provider: MailProvider;
  readonly logger: Logger;
  /** The emailHash key each validated send is hashed with. */
  readonly emailHashKey: EmailHashKey;
  readonly metrics: Registry;
  readonly from: string;
  /** Signs the Message-ID, the ENVID and the unsubscribe token of every message (ADR 012). */
  readonly identifiers: SendIdentifiers;
  /** MESSAGE_ID_DOMAIN: the right-hand side of every Message-ID. */
  readonly messageIdDomain: string;
  readonly unsubscribeMailto: string;
  readonly unsubscribeUrl?: string;
  readonly concurrency: number;
  readonly providerTimeoutMs: number;
  readonly leaseMs: number;
  readonly maxAttempts: number;
  readonly retryBackoffMs: number;
  readonly autoPause: ErrorRatePolicy;
}

/** What a batch needs from its caller: stop signals, and a heartbeat that throws on rebalance. */
export type Control = Pick<BatchContext, 'heartbeat' | 'shouldStop'>;

export const alwaysRun: Control = { heartbeat: async () => undefined, shouldStop: () => false };

function sendMetrics(registry: Registry) {
  return {
    outcomes: counter(registry, 'outreach_sender_sends_total'),
    conflicts: counter(registry, 'outreach_sender_claim_conflicts_total'),
    takeovers: counter(registry, 'outreach_sender_lease_takeovers_total'),
    lost: counter(registry, 'outreach_sender_fence_lost_total'),
    exposureConflicts: counter(registry, 'outreach_sender_exposure_conflicts_total'),
    autoPauses: counter(registry, 'outreach_sender_auto_pauses_total'),
    rateWaiting: gauge(registry, 'outreach_sender_rate_waiting_sends'),
    lateVerdicts: counter(registry, 'outreach_sender_late_verdicts_total'),
    latency: histogram(registry, 'outreach_sender_provider_request_duration_seconds'),
  };
}

export class SendPipeline {
  private readonly metrics: ReturnType<typeof sendMetrics>;
  /** Concurrent sends share their fence and record transactions (each still conditional on its token). */
  private readonly fences: GroupCommit<Claim, FenceResult>;
  private readonly records: GroupCommit<RecordEntry, boolean>;
  /** Provider attempts go to the shared error window in batches; each resolves to its campaign's counts' verdict. */
  private readonly attempts: GroupCommit<ProviderAttempt, string | undefined>;
  private readonly counting = new Set<Promise<void>>();
  private closed = false;
  /** SEND_CONCURRENCY bounds the process's provider calls, across the partitions it works on at once. */
  private readonly limit: ReturnType<typeof pLimit>;
  private readonly lateVerdicts = new Set<Promise<void>>();
  private readonly policy: OutcomePolicy;
  /** The decisions on the repository's rows: claims, checks, fences. */
  private readonly commands: SendCommands;

  constructor(private readonly options: SendPipelineOptions) {
    this.policy = {
      maxAttempts: options.maxAttempts,
      retryBackoffMs: options.retryBackoffMs,
      leaseMs: options.leaseMs,
    };
    this.metrics = sendMetrics(options.metrics);
    this.attempts = new GroupCommit(async (attempts) => {
      const counts = await options.errorWindow.record(attempts);
      // One verdict per campaign and batch: its first attempt carries it, the rest nothing.
      const judged = new Set<string>();
      return attempts.map(({ campaignId }) => {
        if (judged.has(campaignId)) return undefined;
        judged.add(campaignId);
        const campaignCounts = counts.get(campaignId);
        return campaignCounts ? autoPauseReason(campaignCounts, options.autoPause) : undefined;
      });
    });
    this.commands = new SendCommands(options.repository);
    // Each attempt records the key its identifiers are signed with, so a later lookup or retry
    // computes the same Message-ID after a rotation (ADR 012).
    this.fences = new GroupCommit((claims) => this.commands.fenceMany(claims, options.identifiers.currentKeyId));
    this.records = new GroupCommit((entries) => options.repository.recordMany(entries));
    this.limit = pLimit(options.concurrency);
  }

  /** The consumer's handler: validate, claim, then process what this chunk claimed. */
  async handle(
    events: readonly ConsumedEvent[],
    control: Control & Pick<BatchContext, 'loggerFor'>,
  ): Promise<{ rejected: Rejection[] }> {
    const rejected: Rejection[] = [];
    const valid: ValidSend[] = [];
    for (const consumed of events) {
      if (consumed.event.type !== 'SendRequested') {
        rejected.push({
          offset: consumed.offset,
          reason: `unexpected event type ${consumed.event.type} on the send-requested topic`,
        });
        continue;
      }
      const validation = validateSendRequest(consumed.event as SendRequested, this.options.emailHashKey);
      if (validation.ok) valid.push(validation.send);
      else {
        control.loggerFor(consumed).warn({ reason: validation.reason }, 'rejected SendRequested');
        rejected.push({ offset: consumed.offset, reason: validation.reason });
      }
    }
    const { repository } = this.options;
    const { claimed, conflicts } = await this.commands.claim(valid);
    const duplicates = conflicts.filter((c) => c.kind === 'duplicate');
    const own = conflicts.filter((c) => c.kind === 'own');
    this.metrics.conflicts.inc({ kind: 'duplicate' }, duplicates.length);
    this.metrics.conflicts.inc({ kind: 'redelivery' }, own.length);
    const newlySkipped = await repository.recordDuplicates(duplicates);
    this.metrics.outcomes.inc({ outcome: 'skipped_duplicate' }, newlySkipped);
    // A redelivered request whose earlier claim lapsed unsent (its worker died before the fence);
    // the take-over's conditional update leaves every other redelivery as it is.
    const takenOver = await repository.takeOverExpiredClaims(own.map((c) => c.send.sendId));
    this.metrics.takeovers.inc(takenOver.length);
    await this.process([...claimed, ...takenOver], control);
    return { rejected };
  }

  /**
   * Checks, then fence → send → record each claim with bounded concurrency, at the rate shared by
   * every replica (global and per recipient domain). The leases of claims still waiting are renewed
   * while the batch runs; when the batch must stop (or the pipeline closes), claims not yet fenced
   * are released for immediate take-over, and in-flight sends finish first.
   */
  async process(claims: ReadonlyArray<Claim | FreshClaim>, control: Control): Promise<void> {
    if (claims.length === 0) return;
    const { repository } = this.options;
    // A fresh claim whose INSERT saw the gate clear goes straight to its token and the fence (which
    // decides on the facts again, locked); the rest are checked first, so a suppressed or held send
    // never waits for a rate token.
    const clear = claims.filter((c): c is FreshClaim => 'gateClear' in c && c.gateClear);
    const checked = await this.commands.applyChecks(claims.filter((c) => !('gateClear' in c && c.gateClear)));
    this.metrics.outcomes.inc({ outcome: 'suppressed' }, checked.suppressed);
    this.metrics.outcomes.inc({ outcome: 'held' }, checked.held);
    const ready = [...clear, ...checked.ready.map((c) => ({ ...c, emailNorm: c.row.emailNorm }))];

    const waiting = new Map(ready.map((c) => [c.sendId, { sendId: c.sendId, token: c.token }]));
    const renewal = setInterval(
      () => {
        void repository
          .renew([...waiting.values()])
          .catch((error: unknown) => this.options.logger.warn({ err: error }, 'lease renewal failed'));
      },
      Math.max(250, Math.floor(this.options.leaseMs / 3)),
    );
    let stopError: unknown;
    const released: Claim[] = [];
    const giveBack = (claim: Claim) => {
      released.push(claim);
      waiting.delete(claim.sendId);
    };
    try {
      await Promise.all(
        ready.map((claim) =>
          this.limit(async () => {
            if (this.closed || stopError !== undefined || control.shouldStop()) return giveBack(claim);
            try {
              await this.takeToken(recipientDomain(claim.emailNorm));
            } catch (error) {
              // Closed while waiting (shutdown): the claim is given back for another replica. A
              // database error fails the batch, after giving its waiting claims back.
              giveBack(claim);
              if (!this.closed) stopError ??= error;
              return;
            }
            waiting.delete(claim.sendId);
            await this.sendOne(claim);
            try {
              await control.heartbeat();
            } catch (error) {
              stopError ??= error;
            }
          }),
        ),
      );
    } finally {
      clearInterval(renewal);
    }
    await repository.release(released);
    if (stopError !== undefined) throw stopError;
  }

  /** Waits for a token of the shared rate, global and for the recipient's domain. */
  private async takeToken(domain: string): Promise<void> {
    this.metrics.rateWaiting.inc();
    try {
      await this.options.rateLimiter.take(domain);
    } finally {
      this.metrics.rateWaiting.dec();
    }
  }

  /**
   * Stops sending: claims waiting for a rate token are given back (released for immediate take-over
   * by another replica), sends already past the fence finish, and the provider attempts counted
   * so far reach the shared error window.
   */
  async close(): Promise<void> {
    this.closed = true;
    this.options.rateLimiter.close();
    await Promise.allSettled([...this.counting]);
  }

  private compose(row: SendRow): MailMessage {
    const { identifiers, messageIdDomain } = this.options;
    const mailto = `<mailto:${this.options.unsubscribeMailto}?subject=${encodeURIComponent(`unsubscribe ${row.sendId}`)}>`;
    // The one-click URL, the Message-ID and the ENVID carry a MAC, not the sendId alone: sendIds are
    // derived from known inputs, so a bare one would let anyone unsubscribe anyone, or bounce them
    // (domain/identifiers.ts). This process's fence recorded its current key on the row: the key a
    // later lookup or retry makes this Message-ID again with.
    const envelopeId = identifiers.sendIdentifier(row.sendId) as string;
    const url = this.options.unsubscribeUrl
      ? `<${this.options.unsubscribeUrl.replace(/\/$/, '')}/${identifiers.unsubscribeToken(row.sendId)}>`
      : undefined;
    return {
      messageId: `<${envelopeId}@${messageIdDomain}>`,
      envelopeId,
      from: this.options.from,
      to: row.email,
      subject: row.subject,
      text: row.body,
      headers: {
        'List-Unsubscribe': url ? `${url}, ${mailto}` : mailto,
        ...(url ? { 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' } : {}),
        'X-Outreach-Send-Id': row.sendId,
        'X-Outreach-Campaign': row.campaignId,
      },
    };
  }

  /** Fence, call the provider (bounded by a timeout shorter than the lease), record. */
  async sendOne(claim: Claim): Promise<void> {
    const { provider, logger } = this.options;
    const fence = await this.fences.submit(claim);
    if (fence.kind === 'lost') {
      this.metrics.lost.inc();
      logger.info({ sendId: claim.sendId }, 'claim was taken over; not sending');
      return;
    }
    if (fence.kind === 'held') {
      this.metrics.outcomes.inc({ outcome: 'held' });
      return;
    }
    if (fence.kind === 'suppressed') {
      this.metrics.outcomes.inc({ outcome: 'suppressed' });
      return;
    }
    if (fence.kind === 'exposure_conflict') {
      this.metrics.outcomes.inc({ outcome: 'failed' });
      this.metrics.exposureConflicts.inc({ experiment: 'unknown' });
      logger.error(
        { sendId: claim.sendId, exposedVariant: fence.exposedVariant, alert: 'exposure_conflict' },
        'ALERT: blocked a send of a second variant to an exposed candidate',
      );
      return;
    }
    const { row } = fence;
    const log = logger.child({ sendId: row.sendId, correlationId: row.correlationId, campaignId: row.campaignId });
    const started = performance.now();
    // In the trace of the SendRequested that asked for it, while that is being handled (tracing on).
    const result = await withCause(row.causationId, () => this.callProvider(this.compose(row), row.sendId));
    this.metrics.latency.observe(
      { provider: provider.name, result: result.kind },
      (performance.now() - started) / 1000,
    );

    const event = outcomeOf(result, row.attempts, this.policy);
    const recorded = await this.settle(claim, row, event);
    switch (result.kind) {
      case 'sent':
        if (recorded) this.metrics.outcomes.inc({ outcome: 'sent' });
        else log.warn('sent, but the send was resolved elsewhere meanwhile');
        break;
      case 'rejected':
        this.metrics.outcomes.inc({ outcome: 'failed' });
        log.warn({ reason: result.reason }, 'provider rejected the message');
        break;
      case 'unknown':
        // With a late verdict possible, the record marks the wait in the same statement: no
        // operator retry can slip in between the record and the mark.
        this.metrics.outcomes.inc({ outcome: 'ambiguous' });
        log.error({ reason: result.reason }, 'send outcome unknown: recorded as ambiguous, not retried');
        if (result.late) this.awaitLateVerdict(claim, row, result.late);
        break;
      case 'not_sent':
        if (event.type === 'Failed') this.metrics.outcomes.inc({ outcome: 'failed' });
        log.warn({ reason: result.reason, attempts: row.attempts }, 'provider did not take the message');
        break;
      default: {
        const exhaustive: never = result;
        throw new Error(`unexpected provider result ${JSON.stringify(exhaustive)}`);
      }
    }

    this.countAttempt({ campaignId: row.campaignId, failed: result.kind !== 'sent' });
  }

  /**
   * Adds a provider attempt to the shared error window, off the send's path (a batch per round
   * trip), and pauses the campaign when the domain says its counts crossed the threshold. After a
   * pause the campaign's window starts empty, so a resume is not paused again by the same errors.
   */
  private countAttempt(attempt: ProviderAttempt): void {
    const { campaigns, errorWindow, logger } = this.options;
    const task = this.attempts
      .submit(attempt)
      .then(async (pauseReason) => {
        if (pauseReason === undefined) return;
        if (await campaigns.autoPause(attempt.campaignId, pauseReason)) {
          this.metrics.autoPauses.inc();
          logger.error(
            { campaignId: attempt.campaignId, reason: pauseReason, alert: 'auto_pause' },
            'campaign auto-paused',
          );
        }
        await errorWindow.reset(attempt.campaignId);
      })
      .catch((error: unknown) =>
        logger.warn(
          { err: error, campaignId: attempt.campaignId },
          'counting a provider attempt for auto-pause failed',
        ),
      )
      .finally(() => this.counting.delete(task));
    this.counting.add(task);
  }

  /** Applies a provider verdict's event: a retry goes back to `claimed`; the rest are recorded. */
  private async settle(claim: Claim, row: SendRow, event: ResultEvent): Promise<boolean> {
    if (event.type === 'RetryScheduled') return this.options.repository.retryLater(claim, 'RecordResult', event);
    return this.record({ claim, row, command: 'RecordResult', event });
  }

  /**
   * A provider that answers after our timeout: the send was recorded `ambiguous`, and the late
   * verdict replaces it under the same claim token. While it is awaited the row says so (its lease),
   * and an operator can resolve it as sent but not retry it (a second copy). A late acceptance is
   * `sent`, never a retry; a late refusal is as definitive as a timely one.
   */
  private awaitLateVerdict(claim: Claim, row: SendRow, late: Promise<SendResult>): void {
    const log = this.options.logger.child({ sendId: row.sendId, campaignId: row.campaignId });
    const task = late
      .then(async (verdict) => {
        if (verdict.kind === 'unknown') {
          // A provider call that itself ended in a pending verdict (our backstop fired first), or
          // none will come, and an operator may now resolve it either way (a wait of 0).
          const withinMs = verdictWaitMs(verdict, this.policy);
          await this.options.repository.awaitVerdict(claim, { type: 'VerdictAwaited', withinMs });
          if (verdict.late) this.awaitLateVerdict(claim, row, verdict.late);
          return;
        }
        const event = outcomeOf(verdict, row.attempts, this.policy);
        const recorded = await this.settle(claim, row, event);
        switch (verdict.kind) {
          case 'sent':
            if (recorded) this.metrics.lateVerdicts.inc({ result: 'sent' });
            break;
          case 'rejected':
            if (recorded) this.metrics.lateVerdicts.inc({ result: 'rejected' });
            break;
          case 'not_sent':
            if (event.type === 'Failed') this.metrics.outcomes.inc({ outcome: 'failed' });
            this.metrics.lateVerdicts.inc({ result: 'not_sent' });
            break;
          default: {
            const exhaustive: never = verdict;
            throw new Error(`unexpected provider result ${JSON.stringify(exhaustive)}`);
          }
        }
        log.warn({ verdict: verdict.kind }, 'the provider answered after the timeout; its verdict replaces ambiguous');
      })
      .catch((error: unknown) =>
        log.error({ err: error }, 'recording a late provider verdict failed; the send stays ambiguous'),
      )
      .finally(() => this.lateVerdicts.delete(task));
    this.lateVerdicts.add(task);
  }

  /** Verdicts still expected from providers that answered late; settle them before shutdown. */
  async drainLateVerdicts(): Promise<void> {
    await Promise.allSettled([...this.lateVerdicts]);
  }

  /**
   * Records a known outcome. A database blip (transient error) must not turn a known outcome into
   * `ambiguous`, so the record is retried with backoff for up to a lease; the UPDATE accepts a send
   * the reconciler marked ambiguous meanwhile, so a late record still lands the truth.
   */
  private async record(entry: RecordEntry): Promise<boolean> {
    const deadline = Date.now() + this.options.leaseMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.records.submit(entry);
      } catch (error) {
        if (!isTransientError(error) || Date.now() >= deadline) throw error;
        this.options.logger.warn({ err: error, sendId: entry.claim.sendId, attempt }, 'recording failed; retrying');
        await new Promise((resolve) => setTimeout(resolve, Math.min(2_000, 100 * 2 ** attempt)));
      }
    }
  }

  /**
   * The provider decides within PROVIDER_TIMEOUT_MS itself (it knows whether the message left us);
   * this backstop, a little later, only catches a provider that does not, and still hears it out.
   */
  private async callProvider(message: MailMessage, sendId: string): Promise<SendResult> {
    const backstopMs = Math.ceil(this.options.providerTimeoutMs * 1.1) + 50;
    const call = this.options.provider
      .send(message, sendId)
      .catch((error: unknown): SendResult => ({ kind: 'unknown', reason: `provider call threw ${errorName(error)}` }));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<SendResult>((resolve) => {
      timer = setTimeout(
        () => resolve({ kind: 'unknown', reason: `provider call exceeded ${backstopMs} ms`, late: call }),
        backstopMs,
      );
    });
    try {
      return await Promise.race([call, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** An error's class name only: provider errors can quote the recipient. */
function errorName(error: unknown): string {
  return error instanceof Error ? error.name : typeof error;
}
