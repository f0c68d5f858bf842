/**
 * Personal data out of what the console shows of a record it did not build (an event's payload, a
 * dead letter): the value of any field named like an address, a name, a subject or a body is masked,
 * whatever it holds, and any string shaped like an address anywhere else too. Operators need a
 * record's shape, ids and codes to act; they never need who it was for or what it said.
 */
const PERSONAL_FIELD =
  /^(e-?mail|email_?norm|emailNorm|address|recipient|to|from|cc|bcc|reply_?to|name|first_?name|last_?name|full_?name|display_?name|candidate_?name|subject|body|html|text|contents?|message|phone)$/i;
const ADDRESS = /[^\s@<>"'(),;:]+@[^\s@<>"'(),;:]+\.[^\s@<>"'(),;:]+/g;

export const MASK = '[masked]';

/** Whether a field of that name holds personal data (its value is masked whole). */
export function isPersonalField(name: string): boolean {
  return PERSONAL_FIELD.test(name);
}

/** A copy of `value` with personal fields and address-shaped strings masked; at most `depth` levels. */
export function maskPersonal(value: unknown, depth = 16): unknown {
  if (typeof value === 'string') return value.replace(ADDRESS, MASK);
  if (value === null || typeof value !== 'object') return value;
  if (depth <= 0) return '[too deep]';
  if (Array.isArray(value)) return value.map((v) => maskPersonal(v, depth - 1));
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => [
      k,
      isPersonalField(k) && v !== null && v !== undefined ? MASK : maskPersonal(v, depth - 1),
    ]),
  );
}
