/**
 * Keys and normalization, done once at the edge (the planner) and carried in both forms.
 * Pure functions: the same input gives the same key on every machine and every re-run.
 */
import { createHash } from 'node:crypto';

/** Candidate ids are trimmed and Unicode-NFC normalized; they stay case-sensitive. */
export function normalizeCandidateKey(candidateId: string): string {
  return candidateId.trim().normalize('NFC');
}

/**
 * Addresses are trimmed and lower-cased, nothing more: no provider-specific folding (dots, plus
 * tags), because two such addresses may really be two people.
 */
export function normalizeEmail(email: string): string {
  return email.trim().normalize('NFC').toLowerCase();
}

/** Hex SHA-256 of the normalized address: joinable across topics, never the address itself. */
export function emailHash(emailNorm: string): string {
  return createHash('sha256').update(emailNorm, 'utf8').digest('hex');
}

const NAMESPACE = Buffer.from('6f9e3c1e4b2a4f0e9d7c5a3b1e0f2d4c', 'hex');

/** RFC 4122 version-5 (SHA-1, name-based) UUID of `parts` under this platform's namespace. */
export function uuidV5(...parts: readonly string[]): string {
  // Length-prefix each part so ("a|b", "c") and ("a", "b|c") can never collide.
  const name = parts.map((part) => `${Buffer.byteLength(part, 'utf8')}:${part}`).join('');
  const hash = createHash('sha1').update(NAMESPACE).update(name, 'utf8').digest();
  hash[6] = ((hash[6] as number) & 0x0f) | 0x50;
  hash[8] = ((hash[8] as number) & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** The send's identity: identical for every re-run of the same (campaign, candidate, step). */
export function sendIdFor(campaignId: string, candidateKey: string, step: string): string {
  return uuidV5('send', campaignId, candidateKey, step);
}

// Deliberately strict and simple: one @, a dotted domain; no spaces, quotes, angle brackets or controls.
const ADDRESS =
  /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;

/** An address the platform will try to deliver to (after trimming). */
export function isDeliverableAddress(email: string): boolean {
  const trimmed = email.trim();
  return trimmed.length <= 254 && ADDRESS.test(trimmed);
}

/** Line breaks and other controls: in a header they are an injection; in an id, a mistake. */
export function hasControlCharacters(value: string): boolean {
  return CONTROL.test(value);
}
