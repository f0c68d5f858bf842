/** The provider-history rules of domain/history.ts: lines, the step rule, our Message-IDs, the import's name. */
import { addressCandidateKey, canonicalStep } from '@outreach/contracts';
import { testEmailHashKey } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import { historyLine, importIdOf, optionProblem, sendIdOfMessageId, StepsSeen } from './history.js';

const key = testEmailHashKey();
const SEND = '6f9e3c1e-4b2a-5f0e-9d7c-5a3b1e0f2d4c';
const options = { messageIdDomain: 'outreach.local' };
const record = (fields: Record<string, string>) => ({
  recipient: 'Ada@Example.com',
  campaign: 'Camp-1',
  timestamp: '2026-11-28T09:00:00Z',
  provider_message_id: '<p1@provider>',
  ...fields,
});

describe('sendIdOfMessageId', () => {
  it('reads the send id of our own Message-IDs only, with or without brackets', () => {
    expect(sendIdOfMessageId(`<${SEND}@outreach.local>`, 'outreach.local')).toBe(SEND);
    expect(sendIdOfMessageId(`${SEND.toUpperCase()}@Outreach.Local`, 'outreach.local')).toBe(SEND);
    // The signed form (ADR 012), read by its shape: the file is the provider's export, not an outsider's.
    const signed = `${SEND}.k-2026.${'0123456789abcdef'.repeat(2)}`;
    expect(sendIdOfMessageId(`<${signed}@outreach.local>`, 'outreach.local')).toBe(SEND);
    expect(sendIdOfMessageId(`<${signed.toUpperCase()}@OUTREACH.local>`, 'outreach.local')).toBe(SEND);
    expect(sendIdOfMessageId(`<${signed}x@outreach.local>`, 'outreach.local')).toBeNull();
    expect(sendIdOfMessageId(`<${SEND}.k.0123@outreach.local>`, 'outreach.local')).toBeNull();
    expect(sendIdOfMessageId(`<${SEND}@other.example>`, 'outreach.local')).toBeNull();
    expect(sendIdOfMessageId('<not-a-uuid@outreach.local>', 'outreach.local')).toBeNull();
    expect(sendIdOfMessageId('<p1@provider>', 'outreach.local')).toBeNull();
    expect(sendIdOfMessageId(undefined, 'outreach.local')).toBeNull();
  });
});

describe('historyLine', () => {
  it('gives a row the live path canonical keys; without a candidate id the address stands in', () => {
    const line = historyLine(record({ step: 'Intro' }), 2, options, key);
    expect(line).toMatchObject({
      kind: 'row',
      row: { line: 2, campaignId: 'camp-1', step: 'intro', emailNorm: 'ada@example.com', candidateKey: null },
    });
    expect(line.kind === 'row' && line.row.sentAt.toISOString()).toBe('2026-11-28T09:00:00.000Z');
    const withCandidate = historyLine(record({ step: 'intro', candidate_id: 'ada@example.com' }), 3, options, key);
    expect(withCandidate.kind === 'row' && withCandidate.row.candidateKey).toBe(
      addressCandidateKey('ada@example.com', key),
    );
  });

  it('notes the live send a row is, by either id column', () => {
    const byProvider = historyLine(
      record({ step: 'intro', provider_message_id: `<${SEND}@outreach.local>` }),
      2,
      options,
      key,
    );
    expect(byProvider.kind === 'row' && byProvider.row.sendId).toBe(SEND);
    const byMessage = historyLine(record({ step: 'intro', message_id: `<${SEND}@outreach.local>` }), 2, options, key);
    expect(byMessage.kind === 'row' && byMessage.row.sendId).toBe(SEND);
    const theirs = historyLine(record({ step: 'intro' }), 2, options, key);
    expect(theirs.kind === 'row' && theirs.row.sendId).toBeNull();
  });

  it('given --step, a step column naming another step is a mismatch; a blank one takes --step', () => {
    const step = canonicalStep('Intro');
    expect(historyLine(record({ step: 'follow-up-1' }), 4, { ...options, step }, key)).toEqual({
      kind: 'step_mismatch',
      line: 4,
    });
    expect(historyLine(record({ step: ' INTRO ' }), 5, { ...options, step }, key).kind).toBe('row');
    expect(historyLine(record({ step: '' }), 6, { ...options, step }, key)).toMatchObject({
      kind: 'row',
      row: { step: 'intro' },
    });
  });

  it('lists what makes a line unusable by field, never by value', () => {
    const line = historyLine(
      record({ recipient: 'not-an-address', campaign: '', timestamp: 'yesterday', step: 'ada@example.com' }),
      7,
      options,
      key,
    );
    expect(line.kind).toBe('invalid');
    const problems = line.kind === 'invalid' ? line.problems : [];
    expect(problems).toEqual([
      'recipient is not an address',
      'no campaign (column or --campaign)',
      expect.stringMatching(/^step /),
      'timestamp is missing or not a date',
    ]);
    for (const p of problems) expect(p).not.toContain('ada@example.com');
  });
});

describe('StepsSeen: steps a known campaign never had', () => {
  it('refuses an unknown step of a known campaign, with its first lines; a new campaign is new as a whole', () => {
    const seen = new StepsSeen(2);
    for (const [line, campaignId, step] of [
      [2, 'camp-k', 'intro'],
      [3, 'camp-k', 'folow-up-1'],
      [4, 'camp-k', 'folow-up-1'],
      [5, 'camp-k', 'folow-up-1'],
      [6, 'camp-new', 'follow-up-7'],
    ] as const)
      seen.add({ line, campaignId, step });
    const known = new Map([['camp-k', new Set(['intro', 'follow-up-1'])]]);
    expect(seen.campaigns).toEqual(['camp-k', 'camp-new']);
    expect(seen.unknownSteps(known, false)).toEqual([
      { campaignId: 'camp-k', step: 'folow-up-1', lines: [3, 4], count: 3 },
    ]);
    expect(seen.unknownSteps(known, true)).toEqual([]);
  });
});

describe('the import', () => {
  it('is named by its content alone', () => {
    expect(importIdOf('a'.repeat(64))).toBe(importIdOf('a'.repeat(64)));
    expect(importIdOf('a'.repeat(64))).not.toBe(importIdOf('b'.repeat(64)));
  });

  it('refuses options that are empty or hold an address', () => {
    expect(optionProblem('step', 'intro')).toBeUndefined();
    expect(optionProblem('step', ' ')).toBe('--step is empty');
    expect(optionProblem('campaign', 'ada@example.com')).toMatch(/^campaign /);
  });
});
