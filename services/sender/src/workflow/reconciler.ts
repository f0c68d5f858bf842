/**
 * Sweeps expired leases, so no send stays unfinished when its worker died:
 * - `claimed` past its lease: the provider was never called, so it is safe to re-drive under a new
 *   token (this is also how held sends go out after a resume, and operator "retry" resolutions);
 * - `sending` past its lease: the provider may or may not have the message. With a delivery lookup
 *   (ADR 009) the provider is asked by the deterministic Message-ID: found is `sent`; not found once
 *   the attempt's hand-over bound and the lookup's settle time have passed is retried (with backoff,
 *   within MAX_ATTEMPTS); anything sooner or a lookup that fails pushes the lease and asks again
 *   later; a lookup failing past LOOKUP_GIVE_UP_MS leaves it `ambiguous`. Without a lookup (SMTP)
 *   it becomes `ambiguous` at once, for an operator;
 * - `ambiguous` with no late verdict awaited, attempted within LOOKUP_GIVE_UP_MS: with a lookup,
 *   asked the same way, one bounded batch per sweep (an answer not yet decidable marks the row as
 *   awaiting a verdict until it is worth asking again, so the sweep never spins on it).
 * - first of all, lapsed attempts and retries with delivery evidence stored (ADR 009) are settled
 *   `sent` (SettleByEvidence); ambiguous sends get theirs where the evidence arrives or where they
 *   become ambiguous, both under the send's row lock.
 * domain/send.ts decides every one of these (ExpireSendingLease, LookUp); `decideAfterLookup` turns
 * the provider's answer and the attempt's timing, on the database clock, into what it was told.
 * Several instances may sweep at once: claims are taken with SKIP LOCKED, and every transition is
 * conditional on the token and status, so each send is finished by exactly one of them.
 */
import { counter, PeriodicTask, type Counter, type Logger, type Registry } from '@outreach/shared';
import pLimit from 'p-limit';
import { decideAfterLookup, type DeliveryLookup } from '../adapters/providers/lookup.js';
import type { InFlightSend, SendsRepository } from '../adapters/sends-repository.js';
import type { SendIdentifiers } from '../domain/identifiers.js';
import { decide, type LeaseLookup, type OutcomePolicy } from '../domain/send.js';
import { alwaysRun, type SendPipeline } from './send-pipeline.js';

export interface LookupSettings {
  readonly lookup: DeliveryLookup;
  /** The domain of the deterministic Message-ID every provider adapter sets. */
  readonly messageIdDomain: string;
  /** Makes a send's Message-ID again, under the key its attempt recorded (ADR 012). */
  readonly identifiers: SendIdentifiers;
  /**
   * The longest an attempt could still hand the message over after it started: the provider call's
   * timeout, and for SMTP the wait for the reply to the final dot (a server may store it until then).
   */
  readonly handoverWithinMs: number;
  /** How soon to ask again after the lookup failed. */
  readonly recheckMs: number;
  /** A lookup failing this long after the attempt started gives up: the send is an operator's. */
  readonly giveUpAfterMs: number;
  /** Lookups at once. */
  readonly concurrency: number;
}

export interface ReconcilerOptions {
  readonly intervalMs: number;
  /** Retries and their backoff for sends the provider certainly does not hold (the pipeline's). */
  readonly policy: OutcomePolicy;
  /** Without one, a `sending` lease that lapsed makes the send `ambiguous`, as before ADR 009. */
  readonly lookup?: LookupSettings;
  readonly batchSize?: number;
}

type SettleCommand = 'ExpireSendingLease' | 'LookUp';

export class Reconciler {
  /** Its periodic sweep (whose liveness the plugin watches). */
  readonly loop: PeriodicTask;
  private stopped = false;
  private readonly stopping = new AbortController();
  private readonly batchSize: number;
  private readonly limit: ReturnType<typeof pLimit>;
  private readonly ambiguous: Counter;
  private readonly takeovers: Counter;
  private readonly lookups: Counter;

  constructor(
    private readonly repository: SendsRepository,
    private readonly pipeline: SendPipeline,
    private readonly logger: Logger,
    registry: Registry,
    private readonly options: ReconcilerOptions,
  ) {
    this.batchSize = options.batchSize ?? 100;
    this.limit = pLimit(options.lookup?.concurrency ?? 1);
    this.loop = new PeriodicTask('reconciler sweep', () => this.sweep(), options.intervalMs, logger);
    this.ambiguous = counter(registry, 'outreach_sender_lease_expired_ambiguous_total');
    this.takeovers = counter(registry, 'outreach_sender_lease_takeovers_total');
    this.lookups = counter(registry, 'outreach_sender_lookup_decisions_total');
  }

  start(): void {
    this.loop.start();
  }

  /** Run a sweep soon (after a resume or an operator's retry). */
  wake(): void {
    this.loop.wake();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    await this.loop.stop();
  }

  /** One full sweep; returns how many sends it moved or asked about. */
  async sweep(): Promise<number> {
    let moved = 0;
    // Delivery evidence first (ADR 009): a send it settles is neither retried nor looked up.
    while (!this.stopped) {
      const settled = await this.repository.settleStoredEvidence(this.batchSize);
      for (const send of settled)
        this.logger.info(
          { sendId: send.sendId, from: send.from, source: send.source },
          'delivery evidence settled the send: recorded sent',
        );
      moved += settled.length;
      if (settled.length < this.batchSize) break;
    }
    while (!this.stopped) {
      const claims = await this.repository.takeOverExpired(this.batchSize);
      this.takeovers.inc(claims.length);
      if (claims.length > 0) await this.pipeline.process(claims, alwaysRun);

      // Every row here leaves the selection (a transition, or a lease pushed into the future), so a
      // full batch means there may be more, never the same ones again.
      const expired = await this.repository.expiredSending(this.batchSize);
      await this.settleAll(expired, 'ExpireSendingLease');
      moved += claims.length + expired.length;
      if (claims.length < this.batchSize && expired.length < this.batchSize) break;
    }
    const lookup = this.options.lookup;
    if (lookup && !this.stopped) {
      const ambiguous = await this.repository.ambiguousToLookUp(this.batchSize, lookup.giveUpAfterMs);
      await this.settleAll(ambiguous, 'LookUp');
      moved += ambiguous.length;
    }
    return moved;
  }

  private async settleAll(sends: readonly InFlightSend[], command: SettleCommand): Promise<void> {
    await Promise.all(sends.map((send) => this.limit(() => this.settle(send, command))));
  }

  private async settle(send: InFlightSend, command: SettleCommand): Promise<void> {
    const { row, state } = send;
    const claim = { sendId: send.sendId, token: send.token };
    // Shutting down: the next sweep (on any instance) asks; an aborted lookup proves nothing.
    if (this.stopped && this.options.lookup) return;
    const lookup = await this.ask(send);
    if (this.stopped && lookup.kind === 'pending') return;
    const [event] = decide(state, { type: command, token: claim.token, lookup, policy: this.options.policy });
    this.lookups.inc({ status: row.status, decision: this.options.lookup ? lookup.kind : 'none' });
    switch (event?.type) {
      case 'RetryScheduled':
        await this.repository.retryLater(claim, command, event);
        this.logger.warn({ sendId: row.sendId, via: command }, 'the provider has no copy of the send: retrying it');
        break;
      case 'Sent':
        if (await this.repository.record({ claim, row, command, event }))
          this.logger.info({ sendId: row.sendId, via: command }, 'the provider holds the send: recorded sent');
        break;
      case 'Failed':
        if (await this.repository.record({ claim, row, command, event }))
          this.logger.warn(
            { sendId: row.sendId, reason: event.reason },
            'the provider has no copy of the send: failed',
          );
        break;
      case 'LookupDeferred':
      case 'VerdictAwaited':
        await this.repository.extendLease(claim, command, event);
        break;
      case 'Ambiguous':
        if (await this.repository.record({ claim, row, command, event })) {
          this.ambiguous.inc();
          this.logger.error(
            { sendId: row.sendId, campaignId: row.campaignId, reason: event.reason },
            'send is ambiguous: its worker died while sending',
          );
        }
        break;
      default: // a refusal, or a lookup that cannot tell about an ambiguous send: nothing to apply
    }
  }

  /** What the provider says about the send, through the timing rule: never a guess towards a second email. */
  private async ask(send: InFlightSend): Promise<LeaseLookup> {
    const settings = this.options.lookup;
    if (!settings) return { kind: 'unknown' };
    const messageId = settings.identifiers.messageId(send.sendId, settings.messageIdDomain, send.row.messageKeyId);
    // Its attempt signed with a key retired since: the Message-ID that went out cannot be made again,
    // and searching another would find nothing and license a second email.
    if (messageId === undefined) return { kind: 'unknown', reason: 'the identifier key of its attempt is retired' };
    const result = await settings.lookup.find(
      { messageId, recipient: send.row.email, sentAfter: send.row.claimedAt },
      this.stopping.signal,
    );
    const decision = decideAfterLookup(result, {
      attemptStartedAt: send.attemptStartedAt,
      handoverWithinMs: settings.handoverWithinMs,
      settleMs: settings.lookup.settleMs,
      // Read with the row, before the question: a not-found judged a little early only waits longer.
      now: send.now,
      recheckMs: settings.recheckMs,
      giveUpAfterMs: settings.giveUpAfterMs,
    });
    switch (decision.verdict) {
      case 'sent':
        return { kind: 'sent', providerMessageId: messageId };
      case 'retry':
        return { kind: 'not_sent' };
      case 'wait':
        return {
          kind: 'pending',
          withinMs: Math.max(1, decision.until.getTime() - send.now.getTime()),
          reason: decision.reason,
        };
      case 'ambiguous':
        return { kind: 'unknown', reason: decision.reason };
      default: {
        const exhaustive: never = decision;
        throw new Error(`unknown lookup decision ${JSON.stringify(exhaustive)}`);
      }
    }
  }
}
