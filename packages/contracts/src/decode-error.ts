/**
 * The decoder's expected failures, apart from the codec so the body guard can raise them too.
 * The code travels to the DLQ as `dlq-error-code`, so operators can tell a bomb from a truncation.
 */
export type DecodeErrorCode =
  /** Not `C3 01` + fingerprint + body, or shorter than the header. */
  | 'NOT_SINGLE_OBJECT'
  /** The fingerprint names no version of any known schema. */
  | 'UNKNOWN_FINGERPRINT'
  /**
   * Confluent framing (ADR 011) with a registry id this consumer could not learn: the registry was
   * unreachable, or the id names no schema our reader can resolve. Replayable once the registry is back.
   */
  | 'UNKNOWN_SCHEMA_ID'
  /** Longer than the decoder's maximum message size: refused before any byte of the body is read. */
  | 'TOO_LARGE'
  /** The body ends inside a value: it could be the start of a valid message that was cut short. */
  | 'TRUNCATED'
  /**
   * A length, block count or block size that no message within the size limit could hold, or a
   * negative one: what a decompression-bomb-style message looks like.
   */
  | 'INVALID_LENGTH'
  /** More array items and map entries, or deeper nesting, than the decoder allows in one message. */
  | 'LIMIT_EXCEEDED'
  /** Anything else that is not a valid body: bad union or enum index, malformed varint, trailing bytes. */
  | 'INVALID_BODY';

/** Expected failure for bytes that are not one of our events. Never a crash; the caller dead-letters. */
export class DecodeError extends Error {
  override readonly name = 'DecodeError';
  constructor(
    readonly code: DecodeErrorCode,
    message: string,
  ) {
    super(message);
  }
}
