/**
 * Data-subject requests (ADR 014), served by the planner: an export asks each service for its part
 * and streams one JSON document; an erasure erases each service's part, one transaction per service,
 * and reports each store. Both are audited (`subject_requests`) with the subject as a keyed hash.
 *
 * The person is named by a candidate id or an address. The planner's own rows and the sender's sends
 * link the two (an address's sends name candidate keys, a candidate's sends and steps name
 * addresses); the experiment and liveness services know only candidate keys.
 */
import { createHmac, randomUUID, type KeyObject } from 'node:crypto';
import {
  AppError,
  MAX_SUBJECT_KEYS,
  topics,
  type TopicId,
  subjectHash,
  type ErasureStatus,
  type SubjectPartEraseBody,
} from '@outreach/shared';
import { canonicalAddress, candidateKeyFor, type EmailHashKey } from '@outreach/contracts';
import type { SubjectsRepository } from '../adapters/subjects-repository.js';
import { PEERS, type Peer, type SubjectPeers } from '../adapters/subject-peers.js';

export const STORES = ['planner', ...PEERS] as const;
export type Store = (typeof STORES)[number];

export type SubjectName = { readonly candidateId: string } | { readonly email: string };

interface Subject {
  readonly keys: string[];
  readonly emails: string[];
  /** The request's own hash: the candidate key's, or the address's. */
  readonly hash: string;
  readonly byAddress: boolean;
}

export interface StoreErasure {
  readonly status: ErasureStatus;
  readonly rows: Readonly<Record<string, number>>;
}

export interface ErasureReport {
  readonly requestId: string;
  readonly stores: Readonly<Record<Store, StoreErasure>>;
  /**
   * What may still be on its way: a request made before this erasure and not yet read by the planner
   * (or a send not yet claimed) is refused or written scrubbed when it arrives; one whose planning
   * overlapped the erasure may hold the person until a second erasure after `windowMs`.
   */
  readonly inFlight: { readonly windowMs: number; readonly note: string };
}

export const IN_FLIGHT_NOTE =
  'requests made before this erasure may still be on their way for up to windowMs: they are refused or ' +
  'stored scrubbed on arrival; one whose planning overlapped this erasure may hold the person until the ' +
  'erasure is repeated after windowMs (docs/operations.md, "Data-subject requests")';

/**
 * At most `concurrency` at once, `queueMax` waiting; past that a 429 (a burst is told to come back).
 * One caller (a token) holds at most `perCaller` of them, running and waiting together, so one
 * token's flood cannot fill the queue for everyone else.
 */
class Slots {
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  private readonly held = new Map<string, number>();
  constructor(
    private readonly concurrency: number,
    private readonly queueMax: number,
    private readonly perCaller: number,
  ) {}
  async run<T>(caller: string, work: () => Promise<T>): Promise<T> {
    const mine = this.held.get(caller) ?? 0;
    if (mine >= this.perCaller)
      throw new AppError(
        'RATE_LIMITED',
        'too many data-subject requests from this caller at once: retry in a few seconds',
      );
    if (this.active >= this.concurrency && this.waiting.length >= this.queueMax)
      throw new AppError('RATE_LIMITED', 'too many data-subject requests at once: retry in a few seconds');
    this.held.set(caller, mine + 1);
    try {
      if (this.active >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
      else this.active++;
      try {
        return await work();
      } finally {
        const next = this.waiting.shift();
        if (next) next();
        else this.active--;
      }
    } finally {
      const left = (this.held.get(caller) ?? 1) - 1;
      if (left === 0) this.held.delete(caller);
      else this.held.set(caller, left);
    }
  }
}

type Rows = ReadonlyArray<Record<string, unknown>>;

/** Per topic, its retention and what the platform knows of the person's records there. */
export interface LogTopic {
  readonly retentionDays: number;
  /** Event ids of the person's records on the topic, as the stores hold them (this page's rows). */
  readonly eventIds: string[];
  /** Send ids: the key of each of the person's sends whose records the topic carries. */
  readonly sendIds: string[];
  /** Positions the liveness projection stored (`partition:offset`). */
  readonly offsets: string[];
}

const strings = (rows: Rows | undefined, column: string): string[] => [
  ...new Set((rows ?? []).flatMap((r) => (typeof r[column] === 'string' ? [r[column] as string] : []))),
];

/**
 * The export's `log` part (ADR 014): per topic the documented retention (packages/shared
 * kafka/topics.ts) and what the stores know of the person's records there, from the same page of
 * the other parts: the OutreachRequested event ids the sender's and the planner's rows keep, the
 * send ids (a SendRequested and the SendRecorded of each send), and the event ids and positions
 * the liveness projection stored. Never the records' bytes.
 */
export function logPart(parts: Partial<Record<Store, { tables: Record<string, Rows> } | undefined>>): {
  topics: Record<string, LogTopic>;
  note: string;
} {
  const sends = parts.sender?.tables.sends;
  const requestSends = parts.planner?.tables.request_sends;
  const events = parts.liveness?.tables.conversation_events ?? [];
  const sendIds = [...new Set([...strings(sends, 'send_id'), ...strings(requestSends, 'send_id')])];
  const out: Record<string, LogTopic> = {};
  for (const [id, spec] of Object.entries(topics) as Array<[TopicId, (typeof topics)[TopicId]]>) {
    const seen = events.filter((e) => typeof e.source_topic === 'string' && e.source_topic.endsWith(spec.name));
    out[spec.name] = {
      retentionDays: spec.retentionMs / 86_400_000,
      eventIds:
        id === 'outreachRequested'
          ? [...new Set([...strings(sends, 'request_event_id'), ...strings(requestSends, 'request_event_id')])]
          : strings(seen, 'event_id'),
      sendIds: id === 'sendRequested' || id === 'sendRecorded' ? sendIds : [],
      offsets: seen.map((e) => `${String(e.source_partition)}:${String(e.source_offset)}`),
    };
  }
  return {
    topics: out,
    note:
      "from this page of the other parts; each topic's dead-letter topic (.dlq, 30 days) may hold copies; " +
      'the records themselves are not read',
  };
}

export class SubjectRequests {
  /** Erasures have slots of their own: a flood of exports never stalls an erasure. */
  private readonly exports: Slots;
  private readonly erasures: Slots;

  constructor(
    private readonly repository: SubjectsRepository,
    private readonly peers: SubjectPeers,
    private readonly key: KeyObject,
    private readonly hashKey: EmailHashKey,
    limits: {
      readonly concurrency: number;
      readonly queueMax: number;
      readonly perCaller: number;
      readonly inFlightWindowMs: number;
    },
  ) {
    this.exports = new Slots(limits.concurrency, limits.queueMax, limits.perCaller);
    this.erasures = new Slots(limits.concurrency, limits.queueMax, limits.perCaller);
    this.inFlightWindowMs = limits.inFlightWindowMs;
  }

  private readonly inFlightWindowMs: number;

  /** The audit's actor: a keyed hash of the caller's token, the same on every replica and restart. */
  actorOf(token: string): string {
    return createHmac('sha256', this.key).update(`token:${token}`, 'utf8').digest('hex').slice(0, 24);
  }

  private subjectOf(name: SubjectName): Subject {
    if ('candidateId' in name) {
      const key = candidateKeyFor(name.candidateId, this.hashKey);
      if (key === '') throw new AppError('BAD_REQUEST', 'candidateId is empty after canonicalization');
      return { keys: [key], emails: [], hash: subjectHash(this.key, 'candidate', key), byAddress: false };
    }
    const address = canonicalAddress(name.email);
    if (!address) throw new AppError('BAD_REQUEST', 'email is not a deliverable address');
    return { keys: [], emails: [address.norm], hash: subjectHash(this.key, 'address', address.norm), byAddress: true };
  }

  private candidates(keys: readonly string[]) {
    return keys.slice(0, MAX_SUBJECT_KEYS).map((key) => ({ key, hash: subjectHash(this.key, 'candidate', key) }));
  }

  private addresses(emails: readonly string[]) {
    return emails.slice(0, MAX_SUBJECT_KEYS).map((email) => ({ email, hash: subjectHash(this.key, 'address', email) }));
  }

  /**
   * Erases the person everywhere: the sender first (it holds the sends that link addresses and
   * candidate keys, and stops unfenced claims), then the planner's steps and sequences, then the
   * experiment and liveness services by every candidate key found. Audited whatever each store says.
   */
  erase(name: SubjectName, actor: string): Promise<ErasureReport> {
    return this.erasures.run(actor, async () => {
      const subject = this.subjectOf(name);
      const own = await this.repository.resolve(subject.keys, subject.emails);
      const body = (keys: readonly string[], emails: readonly string[]): SubjectPartEraseBody => ({
        candidates: this.candidates(keys),
        addresses: this.addresses(emails),
        subject: subject.hash,
      });
      const sender = await this.peers.erase('sender', body(own.keys, own.emails));
      const keys = [...new Set([...own.keys, ...sender.candidateKeys])];
      const planner = await this.repository.erase(subject.hash, keys, own.emails);
      // With the keys the planner's erasure found by address (a request planned since `resolve`).
      const all = [...new Set([...keys, ...planner.candidateKeys])];
      const [experiment, liveness] = await Promise.all(
        (['experiment', 'liveness'] as const).map((peer) => this.peers.erase(peer, body(all, []))),
      );
      const part = (p: { status: ErasureStatus; rows: Record<string, number> }): StoreErasure => ({
        status: p.status,
        rows: p.rows,
      });
      const report: ErasureReport = {
        requestId: randomUUID(),
        stores: {
          planner: part(planner),
          sender: part(sender),
          experiment: part(experiment as StoreErasure),
          liveness: part(liveness as StoreErasure),
        },
        inFlight: { windowMs: this.inFlightWindowMs, note: IN_FLIGHT_NOTE },
      };
      await this.repository.audit({
        id: report.requestId,
        kind: 'erase',
        byAddress: subject.byAddress,
        actor,
        subjectHash: subject.hash,
        stores: Object.fromEntries(STORES.map((s) => [s, report.stores[s].status])),
      });
      return report;
    });
  }

  /**
   * The export as JSON text chunks: `{ "requestId", "subject", "planner": {...}, "sender": {...},
   * "experiment": {...}, "liveness": {...} }`, each part one page (`limit` rows per table from page
   * `page`) with its `next` page or null; `only` asks for one part. The person's keys are resolved
   * (and a peer failing is a 503) before the first byte, so a started document completes.
   */
  async exportDocument(
    name: SubjectName,
    actor: string,
    options: { readonly limit: number; readonly page: number; readonly only?: Store },
  ): Promise<AsyncGenerator<string>> {
    return this.exports.run(actor, async () => {
      const subject = this.subjectOf(name);
      const own = await this.repository.resolve(subject.keys, subject.emails);
      const parts = options.only ? [options.only] : [...STORES];
      const page = { limit: options.limit, page: options.page };
      // Asked before streaming: every part is bounded, and the status line can still tell a failure.
      const sender = parts.includes('sender')
        ? await this.peers.exportPart('sender', {
            candidates: this.candidates(own.keys),
            addresses: this.addresses(own.emails),
            ...page,
          })
        : undefined;
      const keys = [
        ...new Set([
          ...own.keys,
          ...((sender?.tables.sends ?? []) as Array<{ candidate_key?: unknown }>)
            .map((r) => r.candidate_key)
            .filter((k): k is string => typeof k === 'string' && !k.startsWith('erased:')),
        ]),
      ];
      const answers: Partial<Record<Store, unknown>> = {};
      if (sender) answers.sender = sender;
      if (parts.includes('planner'))
        answers.planner = await this.repository.exportPart(keys, own.emails, options.limit, options.page);
      for (const peer of ['experiment', 'liveness'] as const satisfies readonly Peer[]) {
        if (parts.includes(peer))
          answers[peer] = await this.peers.exportPart(peer, {
            candidates: this.candidates(keys),
            addresses: [],
            ...page,
          });
      }
      const requestId = randomUUID();
      await this.repository.audit({
        id: requestId,
        kind: 'export',
        byAddress: subject.byAddress,
        actor,
        subjectHash: subject.hash,
        stores: Object.fromEntries(parts.map((s) => [s, 'answered'])),
      });
      const subjectView = { candidateKeys: keys, addresses: own.emails };
      const log = options.only ? undefined : logPart(answers as Parameters<typeof logPart>[0]);
      return (async function* document() {
        yield `{"requestId":${JSON.stringify(requestId)},"subject":${JSON.stringify(subjectView)}`;
        for (const store of parts) yield `,${JSON.stringify(store)}:${JSON.stringify(answers[store])}`;
        if (log) yield `,"log":${JSON.stringify(log)}`;
        yield '}\n';
      })();
    });
  }
}
