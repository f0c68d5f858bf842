/** Avro's Parsing Canonical Form of a schema and its CRC-64-AVRO fingerprint (the single-object header). */
import avro from 'avsc';
import { crc64Avro } from './fingerprint.js';

export type AvroSchema = Record<string, unknown>;

export function canonicalForm(schema: AvroSchema): string {
  return JSON.stringify(avro.Type.forSchema(schema as avro.Schema).schema());
}

export function schemaFingerprint(schema: AvroSchema): bigint {
  return crc64Avro(canonicalForm(schema));
}
