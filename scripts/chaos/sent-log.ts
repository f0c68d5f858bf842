/**
 * The sender's sent log, as the suite reads it: every row of the run's `sends` table, in every state,
 * at each poll. The sender's HTTP list (`GET /v1/sends`) answers one status per call and by pages, so
 * the suite reads the table of the run's own sender schema, read-only. It writes nothing there.
 */
import { waitFor, type SmtpSink } from '@outreach/testkit';
import pg from 'pg';
import { TERMINAL, type SentRow } from './checks.js';

export class SentLog {
  private readonly db: pg.Pool;

  constructor(
    databaseUrl: string,
    private readonly schema: string,
  ) {
    this.db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    this.db.on('error', () => undefined); // the postgres-restart scenario drops these connections on purpose
  }

  async rows(): Promise<SentRow[]> {
    const { rows } = await this.db.query<SentRow>(`SELECT send_id AS "sendId", status FROM "${this.schema}".sends`);
    return rows;
  }

  /**
   * Resolves once every request has a terminal row and nothing is mid-send, and that (with the sink's
   * count) held for 3 polls: a restarted sender may still be taking over expired leases.
   */
  async settled(expected: number, sink: SmtpSink, timeoutMs: number, description: string): Promise<void> {
    let stableFor = 0;
    let previous = '';
    await waitFor(
      async () => {
        const all = await this.rows().catch(() => undefined);
        if (!all) return false;
        const done = all.filter((r) => TERMINAL.has(r.status)).length;
        const snapshot = `${done}/${all.length}/${sink.messages.length}`;
        stableFor = snapshot === previous ? stableFor + 1 : 0;
        previous = snapshot;
        return done === all.length && done >= expected && stableFor >= 3;
      },
      { timeoutMs, intervalMs: 500, description },
    );
  }

  async end(): Promise<void> {
    await this.db.end().catch(() => undefined);
  }
}
