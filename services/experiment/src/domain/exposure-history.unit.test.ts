/**
 * Reading pre-platform variant history, line by line: what is accepted, what is refused and why
 * (by field, never quoting a value), and which lines are one exposure.
 */
import { describe, expect, it } from 'vitest';
import {
  csvFields,
  csvHeader,
  definitionProblem,
  firstArms,
  importIdOf,
  parseHistoryLine,
  parseInstant,
  type CsvHeader,
  type LineResult,
} from './exposure-history.js';

const now = new Date('2026-01-01T00:00:00Z');
const header = (text: string): CsvHeader => {
  const parsed = csvHeader(text);
  if (!parsed.ok) throw new Error(parsed.problems.join('; '));
  return parsed.header;
};
const standard = header('candidate,experiment,variant,time,source');
const csv = (text: string, line = 2) => parseHistoryLine('csv', text, line, { now, header: standard });
const ndjson = (value: unknown, line = 1) =>
  parseHistoryLine('ndjson', typeof value === 'string' ? value : JSON.stringify(value), line, { now });
const problemsOf = (result: LineResult) => (result.ok ? [] : result.problems);
const good = { candidate: 'cand-1', experiment: 'subject', variant: 'A', time: '2025-03-01T09:30:00Z' };

describe('CSV lines', () => {
  it('splits on commas, keeps quoted commas and doubled quotes, and refuses stray or open quotes', () => {
    expect(csvFields('a,b ,  c')).toEqual(['a', 'b', 'c']);
    expect(csvFields('"a,b","say ""hi""",')).toEqual(['a,b', 'say "hi"', '']);
    expect(csvFields('"open')).toBeUndefined();
    expect(csvFields('a"b,c')).toBeUndefined();
    expect(csvFields('"a"b,c')).toBeUndefined();
  });

  it('reads a header in any order, with aliases, and names what it lacks', () => {
    const reordered = header('Time,Candidate_ID,experimentId,variant,extra');
    expect(reordered).toEqual({
      positions: { time: 0, candidate: 1, experiment: 2, variant: 3 },
      width: 5,
      ignored: 1,
    });
    expect(csvHeader('candidate,variant')).toEqual({
      ok: false,
      problems: ['the header has no experiment column', 'the header has no time column'],
    });
    expect(csvHeader('candidate,candidate_id,experiment,variant,time')).toEqual({
      ok: false,
      problems: ['the header names candidate twice'],
    });
  });

  it('accepts a line and gives the candidate key the live path gives it', () => {
    const result = csv(' cand-1 ,subject,A,2025-03-01 10:30:00+01:00,legacy-mailer', 7);
    expect(result).toEqual({
      ok: true,
      row: {
        line: 7,
        eventId: expect.any(String),
        candidateKey: 'cand-1',
        experimentId: 'subject',
        variant: 'A',
        exposedAt: new Date('2025-03-01T09:30:00Z'),
        origin: 'legacy-mailer',
      },
    });
  });

  it('refuses a line with the wrong number of fields or a broken quote', () => {
    expect(problemsOf(csv('cand-1,subject,A'))).toEqual(['has 3 fields where the header has 5']);
    expect(problemsOf(csv('"cand-1,subject,A,2025-03-01T09:30:00Z,'))).toEqual(['has an unterminated or stray quote']);
  });
});

describe('NDJSON lines', () => {
  it('accepts an object with the fields (aliases too) and ignores other keys', () => {
    const result = ndjson({ candidateId: 'c1', experiment_id: 'subject', arm: 'B', timestamp: good.time, extra: 1 });
    expect(result).toMatchObject({ ok: true, row: { candidateKey: 'c1', experimentId: 'subject', variant: 'B' } });
  });

  it('refuses what is not an object, and fields of the wrong type, naming each field', () => {
    expect(problemsOf(ndjson('{"candidate": "c1",'))).toEqual(['is not valid JSON']);
    expect(problemsOf(ndjson('[1,2]'))).toEqual(['is not a JSON object']);
    expect(problemsOf(ndjson('null'))).toEqual(['is not a JSON object']);
    expect(
      problemsOf(ndjson({ candidate: 42, experiment: ['subject'], variant: true, time: 1_740_000_000_000 })),
    ).toEqual([
      'candidate must be a string',
      'experiment must be a string',
      'variant must be a string',
      'time must be a string',
    ]);
    expect(problemsOf(ndjson({ ...good, source: 7 }))).toEqual(['source must be a string']);
    expect(problemsOf(ndjson({ candidate: 'c1' }))).toEqual([
      'experiment is missing',
      'variant is missing',
      'time is missing',
    ]);
    expect(problemsOf(ndjson({ ...good, candidateId: 'c2' }))).toEqual(['gives candidate twice']);
    expect(
      ndjson(
        '{"__proto__": {"candidate": "x"}, "candidate": "c1", "experiment": "subject", "variant": "A", "time": "2025-03-01T09:30:00Z"}',
      ),
    ).toMatchObject({
      ok: true,
      row: { candidateKey: 'c1' },
    });
  });
});

describe('field rules', () => {
  it('refuses a candidate id that is an address however the at-sign is spelled, and never quotes it', () => {
    for (const candidate of [
      'ada@leak.example',
      'ada%40leak.example',
      'ada\uff20leak.example',
      'a\u200bda@leak.example',
    ]) {
      const result = ndjson({ ...good, candidate });
      expect(problemsOf(result), candidate).toEqual([
        'candidate must not contain an at-sign (ids travel on topics free of addresses)',
      ]);
      expect(JSON.stringify(result)).not.toMatch(/ada|leak/);
    }
  });

  it('refuses empty, over-long and control-character ids, and at-signs in the other ids', () => {
    expect(problemsOf(ndjson({ ...good, candidate: '   ' }))).toEqual(['candidate is missing or empty']);
    expect(problemsOf(ndjson({ ...good, candidate: 'x'.repeat(257) }))).toEqual([
      'candidate is longer than 256 characters',
    ]);
    expect(problemsOf(ndjson({ ...good, variant: 'A\nB' }))).toEqual([
      'variant contains line breaks or control characters',
    ]);
    expect(problemsOf(ndjson({ ...good, experiment: 'x@y', source: 'ops@corp' }))).toEqual([
      'experiment must not contain an at-sign (ids travel on topics free of addresses)',
      'source must not contain an at-sign (ids travel on topics free of addresses)',
    ]);
  });

  it('takes times with an offset only, that exist, and not in the future', () => {
    expect(parseInstant('2025-03-01T09:30:00Z')).toEqual(new Date('2025-03-01T09:30:00.000Z'));
    expect(parseInstant('2025-03-01T10:30+01:00')).toEqual(new Date('2025-03-01T09:30:00.000Z'));
    expect(parseInstant('2025-03-01 04:30:00.123456-0500')).toEqual(new Date('2025-03-01T09:30:00.123Z'));
    expect(parseInstant('2025-03-01t09:30:00z')).toEqual(new Date('2025-03-01T09:30:00.000Z'));
    for (const bad of [
      '2025-03-01T09:30:00',
      '2025-03-01',
      '2025-02-30T00:00:00Z',
      '2025-03-01T24:00:00Z',
      '1740821400000',
      'yesterday',
    ])
      expect(parseInstant(bad), bad).toBeUndefined();
    expect(problemsOf(ndjson({ ...good, time: '2025-03-01T09:30:00' }))).toEqual([
      'time is not an ISO 8601 date and time with an offset (2025-03-01T09:30:00Z)',
    ]);
    expect(problemsOf(ndjson({ ...good, time: '2026-01-01T00:00:01Z' }))).toEqual(['time is in the future']);
  });

  it('gives one exposure one id: the same line in any spelling is one, another arm or time is another', () => {
    const idOf = (fields: Record<string, string>) => {
      const result = ndjson({ ...good, ...fields });
      if (!result.ok) throw new Error(result.problems.join('; '));
      return result.row.eventId;
    };
    const id = idOf({});
    expect(idOf({ candidate: ' cand-1\u200b ', time: '2025-03-01T10:30:00+01:00', source: 'other' })).toBe(id);
    expect(idOf({ variant: 'B' })).not.toBe(id);
    expect(idOf({ time: '2025-03-01T09:30:01Z' })).not.toBe(id);
    expect(idOf({ candidate: 'Cand-1' })).not.toBe(id); // ids keep their case
  });

  it('checks the experiment and variant against the platform', () => {
    const experiments = new Map([['subject', ['A', 'B']]]);
    expect(definitionProblem({ experimentId: 'subject', variant: 'A' }, experiments)).toBeUndefined();
    expect(definitionProblem({ experimentId: 'subject', variant: 'C' }, experiments)).toBe(
      "variant is not one of the experiment's variants",
    );
    expect(definitionProblem({ experimentId: 'other', variant: 'A' }, experiments)).toMatch(
      /^experiment names no experiment on the platform/,
    );
  });

  it('names an import by its content', () => {
    expect(importIdOf('ab'.repeat(32))).toBe(importIdOf('ab'.repeat(32)));
    expect(importIdOf('ab'.repeat(32))).not.toBe(importIdOf('cd'.repeat(32)));
  });
});

describe('the arm history seeds', () => {
  const row = (candidateKey: string, variant: string, time: string, experimentId = 'subject') => ({
    experimentId,
    candidateKey,
    variant,
    exposedAt: new Date(time),
  });

  it("is each candidate's first arm per experiment; a tie at one instant goes to the lowest name, in any line order", () => {
    const rows = [
      row('c1', 'B', '2025-01-02T00:00:00Z'),
      row('c1', 'A', '2025-01-03T00:00:00Z'),
      row('c1', 'A', '2025-01-01T12:00:00+13:00'), // 2024-12-31T23:00Z: the earliest
      row('c2', 'B', '2025-01-01T00:00:00Z'),
      row('c2', 'A', '2025-01-01T01:00:00+01:00'), // the same instant
      row('c1', 'B', '2025-01-01T00:00:00Z', 'other'),
    ];
    const expected = [
      { experimentId: 'subject', candidateKey: 'c1', variant: 'A', seenAt: new Date('2024-12-31T23:00:00Z') },
      { experimentId: 'subject', candidateKey: 'c2', variant: 'A', seenAt: new Date('2025-01-01T00:00:00Z') },
      { experimentId: 'other', candidateKey: 'c1', variant: 'B', seenAt: new Date('2025-01-01T00:00:00Z') },
    ];
    const byKey = (a: { experimentId: string; candidateKey: string }) => `${a.experimentId}/${a.candidateKey}`;
    const sorted = <T extends { experimentId: string; candidateKey: string }>(list: T[]) =>
      [...list].sort((a, b) => byKey(a).localeCompare(byKey(b)));
    expect(sorted(firstArms(rows))).toEqual(sorted(expected));
    expect(sorted(firstArms([...rows].reverse()))).toEqual(sorted(expected));
  });
});
