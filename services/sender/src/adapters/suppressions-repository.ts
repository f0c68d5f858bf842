/** The suppression list (`sender.suppressions`), by canonical address; the checks read it before every send. */
import type { Pool } from 'pg';

export interface Suppression {
  readonly reason: string;
  readonly note: string | null;
  readonly createdAt: Date;
}

export class SuppressionsRepository {
  constructor(private readonly pool: Pool) {}

  async suppress(emailNorm: string, reason: string, note: string | null): Promise<void> {
    await this.pool.query(
      `INSERT INTO suppressions (email_norm, reason, note) VALUES ($1, $2, $3)
       ON CONFLICT (email_norm) DO UPDATE SET reason = $2, note = $3`,
      [emailNorm, reason, note],
    );
  }

  async unsuppress(emailNorm: string): Promise<boolean> {
    const result = await this.pool.query('DELETE FROM suppressions WHERE email_norm = $1', [emailNorm]);
    return (result.rowCount ?? 0) > 0;
  }

  async suppression(emailNorm: string): Promise<Suppression | undefined> {
    const { rows } = await this.pool.query<Suppression>(
      'SELECT reason, note, created_at AS "createdAt" FROM suppressions WHERE email_norm = $1',
      [emailNorm],
    );
    return rows[0];
  }
}
