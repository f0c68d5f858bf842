/**
 * `npm run schemas:register` (ADR 011): the only writer of our subjects. Per subject it sets
 * FULL_TRANSITIVE, then registers the released versions oldest first and the current one last, so
 * the registry checks each against all before it and refuses an incompatible change (409) before
 * any producer could write it. Rerunning changes nothing. Producers never register (binding.ts).
 */
import type { CompatibilityLevel, SchemaRegistryClient } from './client.js';
import { SchemaRegistryError } from './client.js';
import { publisherSubjects, registrySubjects, type RegistrySubject } from './subjects.js';

export const SUBJECT_COMPATIBILITY: CompatibilityLevel = 'FULL_TRANSITIVE';

export interface RegisteredSubject {
  readonly subject: string;
  /** Registry id of each version, oldest first; the last is the current schema's. */
  readonly ids: readonly number[];
}

export class SchemaRegistrationError extends Error {
  override readonly name = 'SchemaRegistrationError';
  constructor(
    readonly subject: string,
    readonly version: number,
    message: string,
  ) {
    super(message);
  }
}

export async function registerSubject(
  client: SchemaRegistryClient,
  subject: RegistrySubject,
  level: CompatibilityLevel = SUBJECT_COMPATIBILITY,
): Promise<RegisteredSubject> {
  await client.setCompatibility(subject.subject, level);
  const ids: number[] = [];
  for (const [index, schema] of subject.versions.entries()) {
    try {
      ids.push(await client.register(subject.subject, schema));
    } catch (error) {
      if (error instanceof SchemaRegistryError && error.status === 409) {
        throw new SchemaRegistrationError(
          subject.subject,
          index + 1,
          `${subject.subject}: version ${index + 1} of ${subject.versions.length} is not ${level}-compatible with what the registry holds: ${error.message}`,
        );
      }
      throw error;
    }
  }
  return { subject: subject.subject, ids };
}

/** Registers every public topic's subjects under `prefix`, then the publishers' (publisherSubjects). */
export async function registerSchemas(
  client: SchemaRegistryClient,
  options: { prefix?: string } = {},
): Promise<RegisteredSubject[]> {
  const result: RegisteredSubject[] = [];
  for (const subject of [...registrySubjects(options.prefix), ...publisherSubjects(options.prefix)])
    result.push(await registerSubject(client, subject));
  return result;
}
