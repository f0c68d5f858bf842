/**
 * The platform's contracts: the events (generated from schemas/), their codec, the identifiers and keys
 * every service derives the same way, and the shape of a decider. Pure: no Kafka, PostgreSQL, HTTP or
 * clock; the only package a service's domain/ may import.
 */
export * from './events.generated.js';
export { EventCodec, eventCodec, DecodeError, confluentSchemaId, type DecodeErrorCode } from './codec.js';
export { crc64Avro, fingerprintBytes } from './fingerprint.js';
export { canonicalForm, schemaFingerprint, type AvroSchema } from './canonical.js';
export {
  canonicalCampaignId,
  canonicalStep,
  canonicalAddress,
  canonicalSendKeys,
  canonicalCorrelationId,
  canonicalConversationId,
  isSaneCorrelationId,
  candidateKeyFor,
  addressCandidateKey,
  idProblem,
  exactIdProblem,
  utf8Bytes,
  MAX_CONVERSATION_ID_BYTES,
  MAX_EXPERIMENT_ID_CHARS,
  holdsAtSign,
  maskAddressLike,
  normalizeCandidateKey,
  normalizeEmail,
  emailHash,
  uuidV5,
  sendIdFor,
  hasControlCharacters,
  AT_SIGN,
  stripInvisible,
  type EmailHashKey,
} from './keys.js';
export { fold, type Decider } from './decider.js';
export { jsonDepthProblem, MAX_JSON_DEPTH } from './json-depth.js';
