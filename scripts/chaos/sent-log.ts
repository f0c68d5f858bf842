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
    const { rows } = await this.db.query<SentRow>(
      `SELECT send_id AS "sendId", status, reason FROM "${this.schema}".sends`,
    );
    return rows;
  }

  /** Sends whose outcome is open right now: mid-call or lapsed, in doubt, or a retry of an attempt. */
  async inDoubt(): Promise<string[]> {
    const { rows } = await this.db.query<{ sendId: string }>(
      `SELECT send_id AS "sendId" FROM "${this.schema}".sends
       WHERE status IN ('sending', 'ambiguous') OR (status = 'claimed' AND attempts > 0) LIMIT 200`,
    );
    return rows.map((r) => r.sendId);
  }

  /**
   * Resolves once every request has a terminal row and nothing is mid-send, and that (with the sink's
   * count) held for 3 polls: a restarted sender may still be taking over expired leases.
   * `inDoubtForMs`: where sends in doubt are settled (delivery evidence, a lookup), an `ambiguous`
   * row counts as settled only once nothing changed for that long; until then it is on its way.
   */
  async settled(
    expected: number,
    sink: SmtpSink,
    timeoutMs: number,
    description: string,
    inDoubtForMs = 0,
  ): Promise<void> {
    let stableFor = 0;
    let previous = '';
    let changedAt = Date.now();
    await waitFor(
      async () => {
        const all = await this.rows().catch(() => undefined);
        if (!all) return false;
        const terminal = all.filter((r) => TERMINAL.has(r.status));
        const ambiguous = terminal.filter((r) => r.status === 'ambiguous').length;
        const snapshot = `${terminal.length}/${ambiguous}/${all.length}/${sink.messages.length}`;
        stableFor = snapshot === previous ? stableFor + 1 : 0;
        if (snapshot !== previous) changedAt = Date.now();
        previous = snapshot;
        const done = ambiguous === 0 || Date.now() - changedAt >= inDoubtForMs ? terminal.length : 0;
        return done === all.length && done >= expected && stableFor >= 3;
      },
      { timeoutMs, intervalMs: 500, description },
    );
  }

  async end(): Promise<void> {
    await this.db.end().catch(() => undefined);
  }
}
