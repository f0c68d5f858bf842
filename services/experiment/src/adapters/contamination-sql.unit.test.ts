import { describe, expect, it } from 'vitest';
import { contaminatedSql } from './contamination-sql.js';

describe('contamination SQL', () => {
  it('is generated from the domain rule table, one predicate per rule', () => {
    expect(contaminatedSql({ assigned: 'assigned', exposed: 'exposed' })).toBe(
      'cardinality(exposed) > 1 OR (assigned IS NOT NULL AND assigned <> ALL (exposed))',
    );
  });
});
