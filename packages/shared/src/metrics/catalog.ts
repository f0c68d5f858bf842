/**
 * Every metric the platform exports, declared once: name, type, labels and meaning. Code creates
 * metrics only through `counter`/`gauge`/`histogram` (metrics.ts), which take a name from here, and
 * the registry refuses any other name (`createMetricsRegistry`), so this list is the whole surface.
 * docs/operations.md section 10 lists the same metrics (test/monitoring.unit.test.ts keeps the two
 * equal) and the alert rules may only name metrics from here (same test).
 *
 * Naming follows Prometheus' rules: the `outreach_` prefix, base units as suffixes (`_seconds`,
 * `_bytes`), `_total` on counters, and a count's unit (`_rows`, `_sends`, `_messages`) on gauges.
 * Node.js' and the process' own metrics keep their standard `process_`/`nodejs_` names (prom-client's
 * defaults), which public dashboards and alerts expect.
 *
 * Every series also carries `service` (a default label of the service's registry), so rules group
 * by service, never by `job`. Label values come from code (enums, route templates, declared groups
 * and topics) unless `bound` says how many values the data can make.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram';
/** Who registers it: the shared plumbing (every service that uses it) or one service. */
export type MetricOwner = 'shared' | 'planner' | 'sender' | 'experiment' | 'liveness';

export interface MetricSpec {
  readonly type: MetricType;
  readonly owner: MetricOwner;
  readonly help: string;
  readonly labels: readonly string[];
  readonly buckets?: readonly number[];
  /** For a label whose values come from data, not code: what bounds their number. */
  readonly bound?: string;
}

/** Request and call durations: 5 ms to 30 s. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30] as const;

export const METRICS = {
  // ---- every service -------------------------------------------------------------------------
  outreach_build_info: {
    type: 'gauge',
    owner: 'shared',
    help: 'Always 1; its labels name the running build (version, commit from OUTREACH_COMMIT, Node.js version)',
    labels: ['version', 'commit', 'node_version'],
  },
  outreach_http_requests_total: {
    type: 'counter',
    owner: 'shared',
    help: 'HTTP requests answered, by route template (unmatched for no route), method and status class',
    labels: ['route', 'method', 'status_class'],
  },
  outreach_http_request_duration_seconds: {
    type: 'histogram',
    owner: 'shared',
    help: 'HTTP request duration until the response was sent, by route template, method and status class',
    labels: ['route', 'method', 'status_class'],
    buckets: DURATION_BUCKETS,
  },
  outreach_metric_collect_failures_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Scrape-time reads of a gauge that failed or timed out (the gauge kept its previous value), by metric',
    labels: ['metric'],
  },

  // ---- consumers (every service with a consumer) ---------------------------------------------
  outreach_consumer_messages_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Messages consumed, by group, topic and result (handled, dead_lettered)',
    labels: ['group', 'topic', 'result'],
  },
  outreach_consumer_handler_retries_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Handler attempts retried after a transient error',
    labels: ['group', 'topic'],
  },
  outreach_consumer_transient_exhausted_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Events dead-lettered as TRANSIENT_EXHAUSTED: a transient failure outlasted the retry cap',
    labels: ['group', 'topic'],
  },
  outreach_consumer_dlq_value_omitted_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Dead-lettered messages too large for the DLQ topic, written without their value',
    labels: ['group', 'topic'],
  },
  outreach_consumer_crashes_total: {
    type: 'counter',
    owner: 'shared',
    help: 'kafkajs consumer crashes (each is followed by a restart when retriable)',
    labels: ['group'],
  },
  outreach_consumer_credentials_refused: {
    type: 'gauge',
    owner: 'shared',
    help: "1 while the brokers refuse the consumer's credentials and it retries them (KAFKA_AUTH_RETRY_WINDOW_MS), and after the window until the process restarts; 0 otherwise",
    labels: ['group'],
  },
  outreach_consumer_lag_messages: {
    type: 'gauge',
    owner: 'shared',
    help: "Messages not yet consumed: the partition's high watermark minus the group's committed offset (the log start when nothing is committed); sampled at most every 10 s",
    labels: ['group', 'topic', 'partition'],
    bound: "the declared topics' partition counts (12 each by default)",
  },
  outreach_consumer_lag_sample_failures_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Consumer lag samples that failed or timed out (the lag gauge keeps its last values for up to 60 s)',
    labels: [],
  },

  outreach_pg_statements_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Statements this service sent to PostgreSQL through its pool (BEGIN and COMMIT included): divided by sends, the cost per send the benchmark reports',
    labels: [],
  },

  // ---- the transactional outbox (every service) ----------------------------------------------
  outreach_outbox_published_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Outbox rows published to Kafka',
    labels: [],
  },
  outreach_outbox_parked_total: {
    type: 'counter',
    owner: 'shared',
    help: 'Outbox rows moved to outbox_parked: too large for their topic',
    labels: [],
  },
  outreach_outbox_relay_active: {
    type: 'gauge',
    owner: 'shared',
    help: '1 while this instance holds the relay lock and publishes (one instance per service), 0 on standby',
    labels: [],
  },
  outreach_outbox_relay_up: {
    type: 'gauge',
    owner: 'shared',
    help: "1 while this instance's relay loop runs (active or standby), 0 once it exited or stalled",
    labels: [],
  },
  outreach_outbox_unpublished_rows: {
    type: 'gauge',
    owner: 'shared',
    help: 'Outbox rows not yet published to Kafka',
    labels: [],
  },
  outreach_outbox_parked_rows: {
    type: 'gauge',
    owner: 'shared',
    help: 'Outbox records parked as too large for their topic, waiting for an operator',
    labels: [],
  },
  outreach_outbox_oldest_unpublished_age_seconds: {
    type: 'gauge',
    owner: 'shared',
    help: 'Seconds since the oldest unpublished outbox row was written (0 when none): the relay lag',
    labels: [],
  },

  // ---- planner -------------------------------------------------------------------------------
  outreach_planner_rerequests_total: {
    type: 'counter',
    owner: 'planner',
    help: 'Requests for a step already emitted or cancelled, which planned nothing, by the step state and ingress',
    labels: ['state', 'ingress'],
  },
  outreach_planner_peer_auth_failures_total: {
    type: 'counter',
    owner: 'planner',
    help: 'Calls a peer service refused with 401/403 (a token rotation in progress, or stuck)',
    labels: ['peer', 'status'],
  },

  // ---- sender --------------------------------------------------------------------------------
  outreach_sender_sends_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Terminal outcomes recorded, by outcome',
    labels: ['outcome'],
  },
  outreach_sender_claim_conflicts_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Claims that found their slot taken, by kind (duplicate, redelivery)',
    labels: ['kind'],
  },
  outreach_sender_lease_takeovers_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Expired claims taken over under a new token',
    labels: [],
  },
  outreach_sender_fence_lost_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Fences that found the claim taken over: the send did not happen here',
    labels: [],
  },
  outreach_sender_exposure_conflicts_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Sends blocked because the candidate was already sent another variant of the experiment, by experiment',
    labels: ['experiment'],
    bound: 'experiments created through the experiment API (the planner names only experiments that exist)',
  },
  outreach_sender_auto_pauses_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Campaigns paused automatically for their provider error rate',
    labels: [],
  },
  outreach_sender_rate_waiting_sends: {
    type: 'gauge',
    owner: 'sender',
    help: 'Checked claims of this process waiting for a send-rate token (global or their recipient domain)',
    labels: [],
  },
  outreach_sender_late_verdicts_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Provider verdicts that arrived after the timeout and replaced an ambiguous outcome, by result',
    labels: ['result'],
  },
  outreach_sender_provider_request_duration_seconds: {
    type: 'histogram',
    owner: 'sender',
    help: 'Provider call duration, by provider and result',
    labels: ['provider', 'result'],
    buckets: DURATION_BUCKETS,
  },
  outreach_sender_lease_expired_ambiguous_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Sends whose lease expired while sending, recorded as ambiguous',
    labels: [],
  },
  outreach_sender_lookup_decisions_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Sends in doubt settled by the reconciler, by status and what the lookup established (sent, not_sent, pending, unknown; none without a lookup)',
    labels: ['status', 'decision'],
  },
  outreach_sender_sending_paused: {
    type: 'gauge',
    owner: 'sender',
    help: 'The kill switch: 1 while every send of every campaign is held (PUT /v1/sending), 0 otherwise',
    labels: [],
  },
  outreach_sender_ambiguous_sends: {
    type: 'gauge',
    owner: 'sender',
    help: 'Sends whose outcome is unknown and wait for an operator (POST /v1/sends/:id/resolve)',
    labels: [],
  },
  outreach_sender_held_sends: {
    type: 'gauge',
    owner: 'sender',
    help: 'Sends held because their campaign or sending is paused, by campaign (the 50 with most; the rest as _other)',
    labels: ['campaign'],
    bound:
      'at most 52 series: the 50 campaigns with most held sends, _other for the rest, _address for an id holding an address',
  },
  outreach_sender_feedback_reports_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Delivery feedback reports taken in, by source, kind and decision (duplicates not counted)',
    labels: ['source', 'kind', 'decision'],
  },
  outreach_sender_feedback_unverified_ids_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Feedback reports whose Message-ID or ENVID looked like ours but whose MAC did not verify (forged, sent before signed identifiers, or under a retired key), by source and reason; they name no send',
    labels: ['source', 'reason'],
  },
  outreach_sender_delivery_evidence_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Delivery evidence taken in (a report that a message went out, naming a send whose identifier verified), by source and what it did: settled (a send in doubt is now sent), kept (the send was not in doubt: applied if it comes to be), unmatched (a verified identifier of no stored send to that recipient)',
    labels: ['source', 'outcome'],
  },
  outreach_sender_settled_by_evidence_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Sends in doubt settled sent by delivery evidence, by evidence source and the status they were in (claimed: a retry that will not go out; sending: a lapsed attempt; ambiguous)',
    labels: ['source', 'from'],
  },
  outreach_sender_suppressions_added_total: {
    type: 'counter',
    owner: 'sender',
    help: 'Addresses put on the suppression list, by source',
    labels: ['source'],
  },

  // ---- liveness ------------------------------------------------------------------------------
  outreach_liveness_sweeps_total: {
    type: 'counter',
    owner: 'liveness',
    help: 'Completed stall sweeps',
    labels: [],
  },
  outreach_liveness_flags_total: {
    type: 'counter',
    owner: 'liveness',
    help: 'Conversations flagged as stalled, by reason',
    labels: ['reason'],
  },
  outreach_liveness_closes_total: {
    type: 'counter',
    owner: 'liveness',
    help: 'Conversations closed by the sweep, by reason (sequence_completed: the sequence got no reply in its window)',
    labels: ['reason'],
  },
  outreach_liveness_stalled_conversations: {
    type: 'gauge',
    owner: 'liveness',
    help: 'Conversations currently flagged as stalled, by reason',
    labels: ['reason'],
  },
  outreach_liveness_oldest_obligation_age_seconds: {
    type: 'gauge',
    owner: 'liveness',
    help: 'Age of the oldest open obligation (a next step owed), 0 when none',
    labels: [],
  },
} as const satisfies Record<string, MetricSpec>;

export type MetricName = keyof typeof METRICS;
export type MetricNameOf<T extends MetricType> = {
  [N in MetricName]: (typeof METRICS)[N]['type'] extends T ? N : never;
}[MetricName];
export type LabelOf<N extends MetricName> = (typeof METRICS)[N]['labels'][number];

/** prom-client's default metrics (`collectDefaultMetrics`): Node.js and the process, by their standard names. */
export const DEFAULT_METRIC_PREFIXES = ['process_', 'nodejs_'] as const;

export function isDeclaredMetric(name: string): name is MetricName {
  return Object.hasOwn(METRICS, name);
}

export function isDefaultMetric(name: string): boolean {
  return DEFAULT_METRIC_PREFIXES.some((prefix) => name.startsWith(prefix));
}
