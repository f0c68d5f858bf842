/**
 * Keys and their canonical forms: every ingress (Kafka, HTTP, the backfill, suppressions) runs the
 * raw values through these functions before anything is compared, stored or hashed, so spellings
 * that a person would call "the same" can never pass a unique constraint twice. Pure: the same
 * input gives the same key on every machine and every re-run; the hash key comes in as a value.
 *
 * The forms (schemas/README.md "Keys" is the contract; keep the two in step):
 *   campaign id, step  NFKC, invisible characters removed, trimmed, case-folded (`Intro` = `intro`)
 *   candidate key      NFKC, invisible characters removed, trimmed; case kept (external ids); an id
 *                      holding an at-sign is an address: its keyed hash stands in for it
 *                      (`address:<keyId>:<hmac>`, candidateKeyFor)
 *   conversation id    a candidate key's form, without the address rule (one holding an at-sign
 *                      is refused); derived ids (`<campaignId>:<candidate key>`) already have it
 *   address            invisible characters removed, NFC, trimmed; domain through IDNA (UTS #46)
 *                      to lower-case ASCII; identity (emailNorm) also lower-cases the local part;
 *                      plus-tags and dots are kept (no provider-specific folding)
 *
 * Ids travel on topics labelled free of addresses (schemas/README.md), so no id may hold one:
 * campaign ids, steps, request, experiment and conversation ids and variants with an at-sign
 * (after canonicalization, so invisible characters do not hide it) are refused; a correlation id
 * that is not a plain token is replaced (canonicalCorrelationId); a candidate id is pseudonymized.
 */
import { createHash, createHmac, type KeyObject } from 'node:crypto';
import { domainToASCII } from 'node:url';

/**
 * Unicode's Default_Ignorable_Code_Point: zero-width space/joiners (U+200B-U+200D), word joiner
 * (U+2060), BOM (U+FEFF), soft hyphen, bidi marks, variation selectors, ... They render as nothing,
 * so a key that differs only by them is one nobody could tell apart; they arrive by copy and paste.
 */
const INVISIBLE = /\p{Default_Ignorable_Code_Point}/gu;

/** `value` without the characters that render as nothing (the one definition; the logger uses it too). */
export function stripInvisible(value: string): string {
  return value.replace(INVISIBLE, '');
}

/** An at-sign however it arrives: plain, percent-encoded, full-width or small. */
export const AT_SIGN = /@|%40|\uff20|\ufe6b/i;

/** Whether `value` holds an at-sign once invisible characters are gone and compatibility forms folded. */
export function holdsAtSign(value: string): boolean {
  return AT_SIGN.test(stripInvisible(value.normalize('NFKC')));
}

// Something shaped like an address: a local part, an at-sign (AT_SIGN's spellings), and a dotted
// domain whose last label starts with a letter (so `postgres@127.0.0.1` in a connection error stays
// readable). Bounded repetitions keep the cost linear on long, hostile text.
const ADDRESS_LIKE = new RegExp(
  `[\\p{L}\\p{N}\\p{M}.!#$%&'*+/=?^_\`{|}~-]{1,64}(?:${AT_SIGN.source})(?:[\\p{L}\\p{N}\\p{M}_-]{1,63}(?:\\.|%2e|\\uff0e|\\u3002))+[\\p{L}\\p{M}][\\p{L}\\p{N}\\p{M}-]{0,62}`,
  'giu',
);

/**
 * `text` with everything address-shaped replaced by `mask`: the one definition behind the logs'
 * last pass, the DLQ writer's reason headers and the console's mask. Invisible characters go first
 * from text that holds an at-sign: canonicalAddress ignores them, so `ada@exa\u200Bmple.com` is an
 * address the platform would mail, and must be masked like one.
 */
export function maskAddressLike(text: string, mask: string): string {
  if (!AT_SIGN.test(text)) return text;
  return stripInvisible(text).replace(ADDRESS_LIKE, () => mask);
}

/**
 * NFKC folds compatibility forms (full-width `１`, ligatures, ideographic space) into what they
 * stand for. NFKC and case mapping can each produce input for the other (or an invisible
 * character; `ẞ` lower-cases to `ß`, which upper-cases to `SS`), so the steps repeat until nothing
 * changes: the result is a fixed point (property-tested), whatever spelling came in.
 */
function foldIdentifier(value: string, caseFold: boolean): string {
  let current = value;
  for (let round = 0; round < 4; round++) {
    let next = stripInvisible(current.normalize('NFKC'));
    // Upper then lower: a locale-independent approximation of Unicode case folding (ß -> ss, ς -> σ).
    if (caseFold) next = next.toUpperCase().toLowerCase();
    next = stripInvisible(next.normalize('NFKC')).trim();
    if (next === current) break;
    current = next;
  }
  return current;
}

/**
 * The canonical campaign id: `"Camp-1 "`, `"camp-1"` and `"CAMP-１\u200B"` are one campaign. Dashes
 * are not folded: NFKC leaves U+2010 HYPHEN and the other Unicode dashes as they are, so `camp‐1`
 * (U+2010) is another campaign than `camp-1`; mapping look-alikes is a confusables table's job,
 * and one that merged two real campaigns could not be undone.
 */
export function canonicalCampaignId(campaignId: string): string {
  return foldIdentifier(campaignId, true);
}

/** The canonical step name: `Intro`, `intro` and ` intro\u200B` are one step. */
export function canonicalStep(step: string): string {
  return foldIdentifier(step, true);
}

/**
 * The canonical form of a candidate id. Case is kept: candidate ids come from other systems (ATS
 * ids, base64 tokens) where `aB3` and `ab3` can be two people. The key a send is filed under is
 * candidateKeyFor's: this form, unless it holds an address.
 */
export function normalizeCandidateKey(candidateId: string): string {
  return foldIdentifier(candidateId, false);
}

/**
 * The canonical form of a conversation id given by a caller: a candidate key's (NFKC, invisible
 * characters removed, trimmed; case kept, since the id comes from another system). A derived id
 * (`<campaignId>:<candidate key>`) is already in this form. Every ingress that files or looks up
 * a conversation applies it, so an id and its spellings are one conversation.
 */
export function canonicalConversationId(conversationId: string): string {
  return foldIdentifier(conversationId, false);
}

/** An address in its two canonical forms. */
export interface CanonicalAddress {
  /** What the sender mails: local part as given (it may be case-sensitive), domain as IDNA ASCII. */
  readonly address: string;
  /** The address's identity (dedupe, suppressions, hash): `address` with the local part lower-cased. */
  readonly norm: string;
}

// Deliberately strict and simple: one @, a dotted ASCII (after IDNA) domain; no spaces, quotes,
// angle brackets or controls. The local part must be ASCII: see canonicalAddress.
const ADDRESS =
  /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * The canonical address, or null if it is not one the platform will deliver to.
 *
 * The domain goes through IDNA (UTS #46, `domainToASCII`): DNS defines that mapping, so `Bücher.DE`,
 * `xn--bcher-kva.de` and a full-width `ｂüｃｈｅｒ．ｄｅ` are one domain. The local part gets NFC only
 * (RFC 6530): there is no standard mapping for mailbox names, and NFKC could turn a name nobody
 * can receive at (full-width `ａｄａ`) into a stranger's real mailbox, so a local part that is not
 * ASCII after NFC is refused, not rewritten. Plus-tags and dots stay: whether `ada+x` reaches
 * `ada` depends on the provider, and two such addresses may really be two people.
 */
export function canonicalAddress(email: string): CanonicalAddress | null {
  const cleaned = stripInvisible(email).normalize('NFC').trim();
  const at = cleaned.lastIndexOf('@');
  if (at <= 0 || at === cleaned.length - 1) return null;
  const local = cleaned.slice(0, at);
  const domain = domainToASCII(cleaned.slice(at + 1));
  if (domain === '') return null;
  const address = `${local}@${domain}`;
  if (address.length > 254 || !ADDRESS.test(address)) return null;
  return { address, norm: `${local.toLowerCase()}@${domain}` };
}

/**
 * The address's identity (see canonicalAddress). For a string that is no deliverable address it
 * still returns a stable folded form, so a lookup by it finds nothing rather than failing.
 */
export function normalizeEmail(email: string): string {
  return canonicalAddress(email)?.norm ?? stripInvisible(email).normalize('NFC').trim().toLowerCase().normalize('NFC');
}

/** An address the platform will try to deliver to (in its canonical form). */
export function isDeliverableAddress(email: string): boolean {
  return canonicalAddress(email) !== null;
}

/** The secret behind emailHash, and the id events carry so consumers know which key made a hash. */
export interface EmailHashKey {
  readonly id: string;
  /** A KeyObject, not bytes: logging or serializing it by mistake prints nothing of the secret. */
  readonly secret: KeyObject;
}

/**
 * Hex HMAC-SHA256 of the canonical address (`emailNorm`) under the platform's secret key: joinable
 * across topics while the key is the same, and not recomputable from a list of addresses by anyone
 * who lacks the key (an unkeyed SHA-256 is: hashing every known address reverses it).
 */
export function emailHash(emailNorm: string, key: EmailHashKey): string {
  return createHmac('sha256', key.secret).update(emailNorm, 'utf8').digest('hex');
}

/** The candidate key that stands for an address: its keyed hash, never the address (the backfill's too). */
export function addressCandidateKey(emailNorm: string, key: EmailHashKey): string {
  return `address:${key.id}:${emailHash(emailNorm, key)}`;
}

const ADDRESS_CANDIDATE_KEY = /^address:([A-Za-z0-9][A-Za-z0-9._-]{0,63}):[0-9a-f]{64}$/;

/**
 * The key a candidate is filed under: its canonical id (normalizeCandidateKey), or, when that holds
 * an at-sign, addressCandidateKey of it read as an address. Callers do use addresses as candidate
 * ids, and the key is on topics free of addresses (and is their Kafka message key); the hash is
 * the backfill's for the same address, so a history row without a candidate id blocks the live
 * send to a candidate whose id is that address. A new hash key gives such a candidate a new key
 * (docs/operations.md, "The emailHash key").
 */
export function candidateKeyFor(candidateId: string, key: EmailHashKey): string {
  const folded = normalizeCandidateKey(candidateId);
  return AT_SIGN.test(folded) ? addressCandidateKey(normalizeEmail(folded), key) : folded;
}

/**
 * A correlation id that may travel: a plain token (the HTTP header's rule), which cannot look like
 * an address, a line break or a 16 KiB log field.
 */
const CORRELATION_ID = /^[A-Za-z0-9._:/+=-]{1,128}$/;

export function isSaneCorrelationId(value: string): boolean {
  return CORRELATION_ID.test(value);
}

/**
 * The caller's correlation id when it is a plain token, else one derived from the event's id: a
 * fresh id that every redelivery of the event derives alike. Replaced, not refused: the id only
 * links events for tracing, and a request must not fail for how its tracing was spelled.
 */
export function canonicalCorrelationId(correlationId: string, eventId: string): string {
  return isSaneCorrelationId(correlationId) ? correlationId : uuidV5('correlation', eventId);
}

/** A send's keys, each in its canonical form, and the send id derived from them. */
export interface SendKeys {
  readonly campaignId: string;
  /** candidateKeyFor's: the canonical candidate id, or an address's keyed hash. */
  readonly candidateKey: string;
  readonly step: string;
  /** The address to mail (canonicalAddress().address). */
  readonly email: string;
  /** The address's identity (canonicalAddress().norm). */
  readonly emailNorm: string;
  readonly sendId: string;
  /** The caller's correlation id, or one derived from the event id (canonicalCorrelationId). */
  readonly correlationId: string;
  /** The given conversation id in its canonical form (canonicalConversationId); null when none was given. */
  readonly conversationId: string | null;
}

/** What an ingress hands canonicalSendKeys: the raw ids of an OutreachRequested or SendRequested. */
export interface RawSendKeys {
  readonly eventId: string;
  readonly correlationId: string;
  readonly requestId: string;
  readonly campaignId: string;
  readonly candidateId: string;
  readonly step: string;
  readonly email: string;
  readonly experimentId: string | null;
  readonly variant?: string | null;
  readonly conversationId?: string | null;
  /**
   * The key a producer already derived (SendRequested). Kept only when it is an address's keyed
   * hash under another key id than the one given: a key rotation in flight (a follow-up planned
   * under the old key), which no one holding only the new key can recompute.
   */
  readonly candidateKey?: string;
}

const MAX_ID_CHARS = 256;
/**
 * Ids are also bounded in UTF-8 bytes: they are btree keys (the planner's (campaign, candidate, step)
 * primary keys, request ids), and PostgreSQL refuses an index row over ~2.7 kB at insert. 256
 * characters of a 3-byte script would be 768 bytes each; three such ids in one composite key come
 * close to that limit, so the byte bound keeps every composite key of three ids under 1.6 kB.
 */
export const MAX_ID_BYTES = 512;
/** A conversation id given by a caller (indexed alone, and as a prefix of nothing): in UTF-8 bytes. */
export const MAX_CONVERSATION_ID_BYTES = 1024;
/**
 * The experiment service's rule for experiment ids and variant names (1-64 characters; it answers
 * 400 to a longer one): an ingress that calls it refuses a longer id up front rather than failing later.
 */
export const MAX_EXPERIMENT_ID_CHARS = 64;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The UTF-8 size of a string (a lone surrogate counts as the 3 bytes of its replacement). */
export function utf8Bytes(value: string): number {
  return Buffer.byteLength(value, 'utf8');
}

function shapeProblem(name: string, canonical: string): string | undefined {
  if (canonical === '') return `${name} is missing or empty`;
  if (hasControlCharacters(canonical)) return `${name} contains line breaks or control characters`;
  if (canonical.length > MAX_ID_CHARS) return `${name} is longer than ${MAX_ID_CHARS} characters`;
  if (utf8Bytes(canonical) > MAX_ID_BYTES) return `${name} is longer than ${MAX_ID_BYTES} bytes in UTF-8`;
  return undefined;
}

const AT_SIGN_PROBLEM = 'must not contain an at-sign (ids travel on topics free of addresses)';

/**
 * What is wrong with an id in its canonical form, naming the field and never the value: a reason
 * ends up in logs, DLQ headers and 4xx answers. An at-sign is refused because ids travel on topics
 * free of addresses (and in metric labels).
 */
export function idProblem(name: string, canonical: string): string | undefined {
  return (
    shapeProblem(name, canonical) ??
    (holdsAtSign(canonical) ? `${name} ${AT_SIGN_PROBLEM}` : undefined) ??
    (DOT_SEGMENT.test(canonical) ? `${name} ${DOT_SEGMENT_PROBLEM}` : undefined)
  );
}

/**
 * Ids are path segments of the APIs (`/v1/campaigns/{campaignId}/pause`): `.` and `..` are collapsed
 * by every URL parser on the way (`/v1/campaigns/../pause` is `/v1/pause`), so such a campaign could
 * be created and never paused or looked up. Refused where ids enter, like an at-sign.
 */
const DOT_SEGMENT = /^\.{1,2}$/;
const DOT_SEGMENT_PROBLEM = 'must not be "." or ".." (a URL path collapses them)';

// Any control character (C0, DEL and C1), and a surrogate not in a pair (u-mode matches only lone ones).
const EXACT_CONTROL = /\p{Cc}/u;
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * What is wrong with an id that is stored and travels exactly as given (a requestId is the Kafka key
 * of OutreachRejected and the status route's key; an experiment id goes to the experiment service):
 * idProblem's rules, applied to that exact string and never to a trimmed copy, plus no leading or
 * trailing whitespace (Unicode spaces included), no control character of any kind, no lone surrogate.
 */
export function exactIdProblem(name: string, value: string): string | undefined {
  if (EXACT_CONTROL.test(value)) return `${name} contains line breaks or control characters`;
  if (LONE_SURROGATE.test(value)) return `${name} is not well-formed Unicode (a lone surrogate)`;
  if (value.trim() === '') return `${name} is missing or empty`;
  if (value.trim() !== value) return `${name} has leading or trailing whitespace`;
  return idProblem(name, value);
}

/**
 * The one function every ingress runs a send's raw ids through: keys in their canonical forms,
 * the send id, a correlation id that may travel. The problems name fields, never values: a reason
 * ends up in logs and DLQ headers, and the address must not.
 */
export function canonicalSendKeys(
  raw: RawSendKeys,
  hashKey: EmailHashKey,
): { readonly ok: true; readonly keys: SendKeys } | { readonly ok: false; readonly problems: string[] } {
  const campaignId = canonicalCampaignId(raw.campaignId);
  const candidate = normalizeCandidateKey(raw.candidateId);
  const step = canonicalStep(raw.step);
  const address = canonicalAddress(raw.email);
  const optional = (name: string, value: string | null | undefined) =>
    value === null || value === undefined ? undefined : exactIdProblem(name, value);
  const givenConversationId = raw.conversationId ?? null;
  const conversationId = givenConversationId === null ? null : canonicalConversationId(givenConversationId);
  const problems = [
    UUID.test(raw.eventId) ? undefined : 'eventId is not a UUID',
    exactIdProblem('requestId', raw.requestId),
    idProblem('campaignId', campaignId),
    // An address as candidate id is fine: candidateKeyFor pseudonymizes it.
    shapeProblem('candidateId', candidate),
    idProblem('step', step),
    optional('experimentId', raw.experimentId),
    optional('variant', raw.variant),
    // No length bound here: derived conversation ids (`<campaignId>:<candidate key>`) outgrow ids.
    conversationId !== null && (hasControlCharacters(conversationId) || conversationId === '')
      ? 'conversationId is empty or contains line breaks or control characters'
      : undefined,
    conversationId !== null && holdsAtSign(conversationId) ? `conversationId ${AT_SIGN_PROBLEM}` : undefined,
    address ? undefined : 'email is not a deliverable address',
  ].filter((p): p is string => p !== undefined);
  if (problems.length > 0 || !address) return { ok: false, problems };
  const derived = candidateKeyFor(raw.candidateId, hashKey);
  const claimed = raw.candidateKey === undefined ? null : ADDRESS_CANDIDATE_KEY.exec(raw.candidateKey);
  const candidateKey =
    claimed && claimed[1] !== hashKey.id && derived !== candidate ? (raw.candidateKey as string) : derived;
  return {
    ok: true,
    keys: {
      campaignId,
      candidateKey,
      step,
      email: address.address,
      emailNorm: address.norm,
      sendId: sendIdFor(campaignId, candidateKey, step),
      correlationId: canonicalCorrelationId(raw.correlationId, raw.eventId),
      conversationId,
    },
  };
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

/**
 * The send's identity: identical for every re-run of the same (campaign, candidate, step). It
 * canonicalizes its inputs itself (the forms are fixed points), so no caller can derive an id from
 * a raw spelling.
 */
export function sendIdFor(campaignId: string, candidateKey: string, step: string): string {
  return uuidV5('send', canonicalCampaignId(campaignId), normalizeCandidateKey(candidateKey), canonicalStep(step));
}

/** Line breaks and other controls: in a header they are an injection; in an id, a mistake. */
export function hasControlCharacters(value: string): boolean {
  return CONTROL.test(value);
}
