/**
 * PostgreSQL failures by SQLSTATE: is the cause outside the message (retry the same work later) or
 * in it (retrying can only fail again)? Decided by the code's class (its first two characters), with
 * the few exceptions inside a class named, so a code nobody listed still lands on the right side.
 * https://www.postgresql.org/docs/current/errcodes-appendix.html
 */

export type PgErrorKind = 'transient' | 'permanent';

/**
 * Classes whose every code is about the server, the connection or the environment:
 * 08 connection exception, 28 invalid authorization (a rotated password), 3D invalid catalog name
 * (the database is being recreated), 40 transaction rollback (serialization failure, deadlock),
 * 53 insufficient resources (disk full, out of memory, too many connections), 57 operator
 * intervention (statement timeout or cancel, admin or crash shutdown, cannot connect now),
 * 58 system error (I/O), 72 snapshot too old, F0 configuration file error.
 */
const TRANSIENT_CLASSES = new Set(['08', '28', '3D', '40', '53', '57', '58', '72', 'F0']);

/** Codes of other classes that are about the moment, not the message. */
const TRANSIENT_CODES = new Set([
  '25006', // read_only_sql_transaction: a failover left us on a standby, or it is being promoted
  '25P03', // idle_in_transaction_session_timeout
  '25P04', // transaction_timeout
  '55006', // object_in_use
  '55P03', // lock_not_available (lock_timeout, NOWAIT)
  '42501', // insufficient_privilege: a grant is missing or being rotated, as a 403 from a peer
]);

/** Codes of transient classes that are the message's fault after all. */
const PERMANENT_CODES = new Set([
  '40002', // transaction_integrity_constraint_violation: a deferred constraint failed at commit
]);

/** Every class of the appendix, so a five-character code of another library is not taken for one. */
const KNOWN_CLASSES = new Set([
  '00', '01', '02', '03', '08', '09', '0A', '0B', '0F', '0L', '0P', '0Z', '20', '21', '22', '23', '24',
  '25', '26', '27', '28', '2B', '2D', '2F', '34', '38', '39', '3B', '3D', '3F', '40', '42', '44', '53',
  '54', '55', '57', '58', '72', 'F0', 'HV', 'P0', 'XX',
]); // prettier-ignore

/** The SQLSTATE of a pg error (or of its `cause`), when it has one. */
export function sqlState(error: unknown): string | undefined {
  for (let current = error, depth = 0; current && depth < 5; depth++) {
    if (typeof current !== 'object') return undefined;
    const { code, cause } = current as { code?: unknown; cause?: unknown };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && KNOWN_CLASSES.has(code.slice(0, 2))) return code;
    current = cause;
  }
  return undefined;
}

/**
 * `transient` when retrying the same work later can succeed, `permanent` when the statement or its
 * data is at fault (constraint violations, bad input, syntax, program limits, internal errors that
 * specific data can trigger), `undefined` when `error` carries no SQLSTATE.
 */
export function classifyPgError(error: unknown): PgErrorKind | undefined {
  const code = sqlState(error);
  if (code === undefined) return undefined;
  if (PERMANENT_CODES.has(code)) return 'permanent';
  if (TRANSIENT_CODES.has(code) || TRANSIENT_CLASSES.has(code.slice(0, 2))) return 'transient';
  return 'permanent';
}

/**
 * node-postgres's own failures carry no SQLSTATE: the connection dropped, a connect or a query
 * (`query_timeout`) timed out, or a client was used after its connection failed.
 */
export const PG_CLIENT_TRANSIENT_MESSAGE =
  /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect|Query read timeout/i;
