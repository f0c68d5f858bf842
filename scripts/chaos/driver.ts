/**
 * How a scenario drives the platform: it publishes through the public ingress only (the topic, or the
 * planner's HTTP endpoint), waits for a share of the deliveries, watches the sender's readiness,
 * restarts the scenario's own broker or database, and collects notes for the report.
 */
import { EventProducer, topicName } from '@outreach/shared';
import { type OutreachRequested } from '@outreach/contracts';
import { waitFor, type SmtpSink } from '@outreach/testkit';
import { ingressBody, type Stack } from '../lib/stack.js';
import type { OwnInfra } from './own-infra.js';
import type { Kafka, PublishOptions, Run } from './scenario.js';
import type { SenderMetrics } from './sender-metrics.js';

/** How long a restarted broker or database stays down, at most, waiting for the sender to notice. */
const OUTAGE_NOTICE_MS = 15_000;

export class Driver implements Run {
  readonly notes: string[] = [];
  readonly restartKafka?: () => Promise<boolean>;
  readonly restartPostgres?: () => Promise<boolean>;
  private publishedCount = 0;
  private producer: EventProducer;
  private readonly requestsTopic: string;

  constructor(
    readonly stack: Stack,
    readonly sink: SmtpSink,
    readonly kafka: Kafka,
    readonly requests: readonly OutreachRequested[],
    own: OwnInfra,
    private readonly timeoutMs: number,
    private readonly metrics?: SenderMetrics,
  ) {
    this.producer = new EventProducer(kafka);
    this.requestsTopic = topicName('outreachRequested', stack.prefix);
    if (own.ownsKafka) {
      this.restartKafka = () => own.restartKafka(() => this.senderNoticesOutage(OUTAGE_NOTICE_MS));
    }
    if (own.ownsPostgres) {
      this.restartPostgres = () => own.restartPostgres(() => this.senderNoticesOutage(OUTAGE_NOTICE_MS));
    }
  }

  /** Requests handed to the ingress so far, repeats included. */
  get published(): number {
    return this.publishedCount;
  }

  async beforeSenderKill(): Promise<void> {
    await this.metrics?.sample();
  }

  note(text: string): void {
    this.notes.push(text);
  }

  async progress(share: number): Promise<void> {
    await waitFor(() => this.sink.messages.length >= Math.floor(this.requests.length * share), {
      timeoutMs: this.timeoutMs,
      description: `${Math.round(share * 100)}% of the requests delivered`,
    });
  }

  async publish(events: readonly OutreachRequested[], options?: PublishOptions): Promise<void> {
    if (options?.via === 'http') {
      for (let i = 0; i < events.length; i += 25) {
        await Promise.all(
          events
            .slice(i, i + 25)
            .map((r) => this.stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: ingressBody(r) })),
        );
      }
      this.publishedCount += events.length;
      return;
    }
    if (options?.fresh) {
      await this.producer.disconnect();
      this.producer = new EventProducer(this.kafka);
    }
    for (let i = 0; i < events.length; i += 500) {
      await this.producer.publish(events.slice(i, i + 500).map((event) => ({ topic: this.requestsTopic, event })));
    }
    this.publishedCount += events.length;
  }

  senderNoticesOutage(timeoutMs: number): Promise<boolean> {
    return waitFor(async () => !(await fetch(this.stack.url('sender', '/health/ready')).then((r) => r.ok)), {
      timeoutMs,
      intervalMs: 100,
      description: 'the sender to report the outage',
    }).then(
      () => true,
      () => false,
    );
  }

  async close(): Promise<void> {
    await this.producer.disconnect().catch(() => undefined);
  }
}
