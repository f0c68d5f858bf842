/**
 * Node's TLS error codes, by what an operator must fix: the chain is not trusted (a CA to give), or
 * a certificate is outside its validity (one to renew, or a clock to set). Kafka and PostgreSQL
 * name both in their start-up errors.
 */

/** The peer's chain does not lead to a CA we trust. */
export const TLS_TRUST_CODES: ReadonlySet<string> = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
]);

/** A certificate in the chain has expired or is not valid yet. */
export const TLS_VALIDITY_CODES: ReadonlySet<string> = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);
