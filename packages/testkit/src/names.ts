import { randomBytes } from 'node:crypto';

/** A name no other spec (or earlier run) uses: topics, groups, schemas. Lower-case, [a-z0-9_]. */
export function uniqueName(prefix: string): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9]+/g, '_');
  return `${clean}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}
