/** The shape of a reliability scenario, and what it can reach while it runs. */
import type { createKafka } from '@outreach/shared';
import type { OutreachRequested } from '@outreach/contracts';
import type { SmtpHostility, SmtpSink } from '@outreach/testkit';
import type { Stack } from '../lib/stack.js';
import type { EvidenceSource } from './evidence.js';

export type Kafka = ReturnType<typeof createKafka>;

export interface PublishOptions {
  /** A new producer first: it sees partitions added since the last one connected at once. */
  readonly fresh?: boolean;
  /** Through the planner's HTTP endpoint instead of the topic. */
  readonly via?: 'http';
}

/** What a scenario can reach while it runs. */
export interface Run {
  readonly stack: Stack;
  readonly sink: SmtpSink;
  readonly kafka: Kafka;
  readonly requests: readonly OutreachRequested[];
  /** Resolves once the SMTP sink has at least this share of the requests delivered. */
  progress(share: number): Promise<void>;
  /** Through the topic (a `fresh` producer sees new partitions at once), or the planner's HTTP endpoint. */
  publish(requests: readonly OutreachRequested[], options?: PublishOptions): Promise<void>;
  /** Resolves once the sender's readiness route reports it unready, or after `timeoutMs` (returns false). */
  senderNoticesOutage(timeoutMs: number): Promise<boolean>;
  /** Stop, stay down until the sender reports it unready (at most 15 s), start. True if it noticed. */
  restartKafka?(): Promise<boolean>;
  restartPostgres?(): Promise<boolean>;
  /** Right before the sender is SIGKILLed: its counters are read, since the kill loses them. */
  beforeSenderKill(): Promise<void>;
  note(text: string): void;
}

export interface Scenario {
  readonly name: string;
  readonly fault: string;
  readonly partitions?: number;
  readonly sinkDelayMs?: number;
  /** How the SMTP sink misbehaves in transaction `n`; each time it does adds one to the ambiguous bound. */
  readonly hostile?: (n: number) => SmtpHostility | undefined;
  readonly ownKafka?: boolean;
  readonly ownPostgres?: boolean;
  /**
   * On the secured broker over SASL_SSL (secured-kafka.ts): every service and the driver as its own
   * SCRAM principal, with only the generated ACLs.
   */
  readonly secured?: boolean;
  /**
   * The sender settles sends in doubt by asking the SMTP sink's Mailpit search API for their
   * Message-ID (PROVIDER_LOOKUP=mailpit, ADR 009) instead of leaving them ambiguous.
   */
  readonly lookup?: boolean;
  /**
   * A provider that reports every message the SMTP sink stores posts delivery evidence to the sender
   * (evidence.ts: SendGrid events, or success DSNs from a sink that offers DSN), and the sender runs
   * with PROVIDER_LOOKUP=evidence: a send in doubt is settled from that evidence, or retried once no
   * evidence came within DELIVERY_EVIDENCE_WINDOW_MS. No send may be left ambiguous.
   */
  readonly evidence?: EvidenceSource;
  /** How many times the scenario SIGKILLs the sender: the report gives ambiguous sends per kill. */
  readonly kills?: number;
  /** Starts the processes and publishes the load (default: one planner, one sender, each request once). */
  readonly load?: (run: Run) => Promise<void>;
  /** Injects the fault; returns how many sends could have been in flight at it. */
  readonly inject: (run: Run) => Promise<number>;
}
