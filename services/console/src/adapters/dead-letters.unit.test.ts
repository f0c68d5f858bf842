import { describe, expect, it } from 'vitest';
import { MASK } from '../domain/mask.js';
import { maskHeaders } from './dead-letters.js';

describe('maskHeaders', () => {
  it('masks addresses in header names, values under personal names, and any address spelling', () => {
    expect(
      maskHeaders({
        'dlq-error-code': 'REJECTED',
        'victim.header@example.com': 'x',
        recipientName: Buffer.from('Ada Lovelace'),
        'dlq-reason': ['bounced for victim.fw\uff20example.com and victim.pct%40example.com'],
        'x-empty': undefined,
      }),
    ).toEqual({
      'dlq-error-code': 'REJECTED',
      [MASK]: 'x',
      recipientName: MASK,
      'dlq-reason': `bounced for ${MASK} and ${MASK}`,
    });
  });

  it('masks before cutting a value to 1000 characters', () => {
    const value = `${'x'.repeat(990)} victim.long@example.com`;
    const shown = maskHeaders({ 'dlq-reason': value })['dlq-reason'] ?? '';
    expect(shown).not.toContain('victim');
    expect(shown.length).toBeLessThanOrEqual(1_001);
  });
});
