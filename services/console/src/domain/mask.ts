/**
 * Personal data out of what the console shows of a record it did not build (an event's payload, a
 * dead letter's headers): the value of any field named like an address, a name, a subject or a body
 * is masked, whatever it holds, and any string shaped like an address anywhere else too, object keys
 * and header names included. Operators need a record's shape, ids and codes to act; they never need
 * who it was for or what it said.
 *
 * Addresses are found by the platform's one definition (contracts' maskAddressLike, which the logs
 * use too: every at-sign spelling AT_SIGN knows, invisible characters ignored, bounded repetitions so
 * the cost stays linear on hostile text). A string is cut to a bound before masking, with a margin longer than an
 * address, and cut to the bound again after: an address across the first cut is masked whole, and a
 * megabyte of junk costs a bounded pass.
 */
import { maskAddressLike } from '@outreach/contracts';

/**
 * Fields whose value is masked whole: the names the platform and its providers use, and anything
 * named like a name, a subject, a body or a text (`recipientName`, `surname`, `subjectLine`,
 * `bodyText`, `snippet`, `htmlPart`; not `context`).
 */
const PERSONAL_FIELD =
  /^(e-?mail|email_?norm|emailNorm|address|recipient|to|from|cc|bcc|reply_?to|contents?|message|phone)$|name$|subject|body|snippet|(?<!con)text|html/i;

export const MASK = '[masked]';

/** The longest string shown of a value (more is cut, with an ellipsis). */
export const MAX_TEXT = 10_000;
/** Longer than any address the mask finds a start of: what is read past a cut before masking. */
const CUT_MARGIN = 512;

/** Whether a field of that name holds personal data (its value is masked whole). */
export function isPersonalField(name: string): boolean {
  return PERSONAL_FIELD.test(name);
}

/** `text` with addresses masked, at most `max` characters of it (mask first, then cut). */
export function maskText(text: string, max = MAX_TEXT): string {
  const bounded = text.length > max + CUT_MARGIN ? text.slice(0, max + CUT_MARGIN) : text;
  const masked = maskAddressLike(bounded, MASK);
  return masked.length > max ? `${masked.slice(0, max)}…` : masked;
}

/** A copy of `value` with personal fields and address-shaped strings masked; at most `depth` levels. */
export function maskPersonal(value: unknown, depth = 16): unknown {
  if (typeof value === 'string') return maskText(value);
  if (value === null || typeof value !== 'object') return value;
  if (depth <= 0) return '[too deep]';
  if (Array.isArray(value)) return value.map((v) => maskPersonal(v, depth - 1));
  // Keys masked alike stay apart (`[masked]`, `[masked] (2)`, ...); fromEntries, so `__proto__` is a key.
  const seen = new Map<string, number>();
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => {
      const key = maskText(k, 200);
      const n = (seen.get(key) ?? 0) + 1;
      seen.set(key, n);
      const shown = isPersonalField(k) && v !== null && v !== undefined ? MASK : maskPersonal(v, depth - 1);
      return [n === 1 ? key : `${key} (${n})`, shown];
    }),
  );
}
