/**
 * The other services, asked for their parts of a data subject's export or erasure (ADR 014), over
 * the service-to-service HTTP the planner already uses (a bearer token per peer, ADR 010):
 * `POST <peer>/v1/subject-parts/export|erase`, the address in the body only. An answer is read
 * bounded and checked against the protocol's schema; a peer that is down, refuses our token or
 * answers nonsense is a 503 naming the peer (the request can be repeated: each part is idempotent).
 */
import {
  AppError,
  readBoundedJson,
  SubjectPartEraseAnswer,
  SubjectPartExportAnswer,
  type SubjectPartEraseBody,
  type SubjectPartExportBody,
} from '@outreach/shared';
import type { TSchema, Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

export const PEERS = ['sender', 'experiment', 'liveness'] as const;
export type Peer = (typeof PEERS)[number];

/** A part's page is at most MAX_SUBJECT_PAGE rows of a handful of tables: 16 MiB is far past a healthy one. */
const MAX_PART_BYTES = 16 * 1024 * 1024;

export interface PeerEndpoint {
  readonly url: string;
  /** Asked at every call: token files are read again while the planner runs. */
  readonly token: () => string;
}

export class SubjectPeers {
  constructor(
    private readonly peers: Readonly<Record<Peer, PeerEndpoint>>,
    private readonly timeoutMs: number,
  ) {}

  exportPart(peer: Peer, body: SubjectPartExportBody): Promise<SubjectPartExportAnswer> {
    return this.call(peer, 'export', body, SubjectPartExportAnswer);
  }

  erase(peer: Peer, body: SubjectPartEraseBody): Promise<SubjectPartEraseAnswer> {
    return this.call(peer, 'erase', body, SubjectPartEraseAnswer);
  }

  private async call<S extends TSchema>(peer: Peer, op: string, body: unknown, schema: S): Promise<Static<S>> {
    const endpoint = this.peers[peer];
    let response: Response;
    try {
      response = await fetch(`${endpoint.url.replace(/\/$/, '')}/v1/subject-parts/${op}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${endpoint.token()}` },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new AppError('UNAVAILABLE', `the ${peer} service did not answer (${(error as Error).name})`, { peer });
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => undefined);
      const why =
        response.status === 401 || response.status === 403
          ? 'refused our token (check the planner token it lists under read and erase)'
          : `answered ${response.status}`;
      throw new AppError('UNAVAILABLE', `the ${peer} service ${why}`, { peer, status: response.status });
    }
    const read = await readBoundedJson(response, MAX_PART_BYTES).catch(() => ({ ok: false as const }));
    if (!read.ok || !Value.Check(schema, read.value))
      throw new AppError('UNAVAILABLE', `the ${peer} service's answer is not of the documented shape`, { peer });
    return read.value as Static<S>;
  }
}
