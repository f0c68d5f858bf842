/**
 * What a refused request's publisher is told: a closed list of codes, and a detail that names fields
 * of the request but never repeats a value from it, whatever the problem text holds.
 */
import { schemaDefinitions, uuidV5, type OutreachRequested } from '@outreach/contracts';
import { testEmailHashKey } from '@outreach/testkit';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addressable,
  contentMissing,
  fieldPath,
  fieldsNamed,
  fieldsOfValidation,
  invalidRequest,
  outreachRejected,
  REJECTION_REASONS,
  stepTaken,
  unknownExperiment,
} from './rejection.js';
import { requestEvent } from '../../test/requests.js';
import { validateRequest } from './request.js';

let ids = 0;
/** A fresh UUID per call (the domain's tests take no randomness). */
const randomUUID = () => uuidV5('test', String(++ids));

const hashKey = testEmailHashKey();

const request = (fields: Partial<OutreachRequested> = {}) =>
  requestEvent({
    eventId: randomUUID(),
    correlationId: 'corr-1',
    requestId: 'ats-7731',
    campaignId: 'spring',
    candidateId: 'cand-1',
    email: 'ada.lovelace@example.com',
    contents: [{ variant: null, subject: 'Hello Ada', body: 'Dear Ada Lovelace' }],
    ...fields,
  });

/** The fields OutreachRejected names for a request that fails validation. */
function refusedFields(fields: Partial<OutreachRequested>): string {
  const validation = validateRequest(request(fields), hashKey);
  if (validation.ok) throw new Error('expected a refusal');
  return invalidRequest(validation.fields).detail;
}

describe('the reason codes', () => {
  it('are the closed list of OutreachRejected.avsc, in its order (docs/publishers.md has a row for each)', () => {
    expect(REJECTION_REASONS).toEqual([
      'invalid_request',
      'unknown_experiment',
      'no_content_for_variant',
      'no_default_content',
      'step_already_emitted',
      'step_already_cancelled',
    ]);
    const reason = (
      schemaDefinitions.OutreachRejected.current as { fields: Array<{ name: string; type: unknown }> }
    ).fields.find((f) => f.name === 'reason')?.type as { default: string };
    // An older reader meets a code added later as this one.
    expect(reason.default).toBe('invalid_request');
  });
});

describe('given a request that fails validation, then the detail names its fields and none of its values', () => {
  const cases: Array<[string, Partial<OutreachRequested>, string]> = [
    ['no address', { email: 'Ada Lovelace' }, 'fields: email'],
    ['an empty campaign', { campaignId: ' ' }, 'fields: campaignId'],
    ['a step holding an address', { step: 'ada@example.com' }, 'fields: step'],
    [
      'a header injection',
      { contents: [{ variant: null, subject: 'Hi\r\nBcc: x@y.z', body: 'b' }] },
      'fields: contents[0].subject',
    ],
    ['an empty body', { contents: [{ variant: null, subject: 'Hi', body: ' ' }] }, 'fields: contents[0].body'],
    [
      'variants without an experiment',
      { contents: [{ variant: 'A', subject: 's', body: 'b' }] },
      'fields: contents, experimentId',
    ],
    [
      'a follow-up without content',
      { followUps: [{ step: 'nudge', delayMs: 1, contents: [] }] },
      'fields: followUps[0].contents',
    ],
    [
      'a follow-up with a non-positive delay',
      { followUps: [{ step: 'nudge', delayMs: 0, contents: [{ variant: null, subject: 's', body: 'b' }] }] },
      'fields: followUps[0].delayMs',
    ],
    [
      'a follow-up body too large',
      {
        followUps: [
          { step: 'nudge', delayMs: 1, contents: [{ variant: null, subject: 's', body: 'x'.repeat(100_001) }] },
        ],
      },
      'fields: followUps[0].contents[0].body',
    ],
    ['an event id that is no UUID', { eventId: 'Ada Lovelace' }, 'fields: eventId'],
    [
      'several at once',
      { email: 'nope', campaignId: '', contents: [{ variant: null, subject: '', body: 'b' }] },
      'fields: campaignId, email, contents[0].subject',
    ],
  ];
  it.each(cases)('%s', (_label, fields, detail) => {
    const told = refusedFields(fields);
    expect(told).toBe(detail);
    for (const value of ['Ada', 'Lovelace', 'example.com', '@', 'Bcc']) expect(told).not.toContain(value);
  });
});

describe('fieldsNamed keeps only field names of OutreachRequested', () => {
  it('drops words and values that are not field names, even ones shaped like a path', () => {
    expect(fieldsNamed(['no content for variant(s) AdaLovelace, bob of the experiment'])).toEqual([]);
    expect(fieldsNamed(['candidate is not enrolled (ada.lovelace) and the request has no default content'])).toEqual(
      [],
    );
    expect(fieldPath('contents[0].subject')).toBe('contents[0].subject');
    expect(fieldPath('subject')).toBeNull(); // a field name, but not at the top
    expect(fieldPath('contents[0].password')).toBeNull();
    expect(fieldPath('email[99999]')).toBeNull();
  });

  it('for any text around a field, the detail holds field names and the platform words only', () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), fc.constantFrom('email', 'campaignId', 'contents[1].body'), (a, b, f) => {
        const detail = invalidRequest(fieldsNamed([`${a} ${f} ${b}`, `followUps[2]: ${a}`])).detail;
        const words = detail
          .replace(/^fields: /, '')
          .split(', ')
          .filter((w) => w !== '...');
        for (const word of words)
          if (detail.startsWith('fields: ')) expect(fieldPath(word), `${word} in ${detail}`).toBe(word);
        expect(detail).toMatch(
          /^(fields: [A-Za-z0-9[\].]+(, [A-Za-z0-9[\].]+)*(, \.\.\.)?|the request does not meet the request rules)$/,
        );
      }),
      { numRuns: 500, seed: 21 },
    );
  });

  it("maps the HTTP body's schema errors to fields, never repeating an unknown property's own name", () => {
    expect(
      fieldsOfValidation([
        { instancePath: '', keyword: 'required', params: { missingProperty: 'email' } },
        { instancePath: '/contents/0', keyword: 'required', params: { missingProperty: 'subject' } },
        { instancePath: '/followUps/1/delayMs', keyword: 'maximum', params: {} },
        { instancePath: '', keyword: 'additionalProperties', params: { additionalProperty: 'ada@example.com' } },
        { instancePath: '/contents/0', keyword: 'additionalProperties', params: { additionalProperty: 'Ada' } },
      ]),
    ).toEqual(['email', 'contents[0].subject', 'followUps[1].delayMs', 'contents[0]']);
  });
});

describe('the other reasons', () => {
  it('say what happened in fixed words, and name the send that holds a step already taken', () => {
    const sendId = randomUUID();
    expect(stepTaken('emitted', sendId)).toEqual({
      reason: 'step_already_emitted',
      detail: 'the step was already emitted for another request: nothing was planned',
      sendId,
    });
    expect(stepTaken('cancelled', sendId).reason).toBe('step_already_cancelled');
    expect(unknownExperiment).toMatchObject({ reason: 'unknown_experiment', sendId: null });
    expect(contentMissing('no_content_for_variant', 'followUps[2].contents').detail).toBe(
      'followUps[2].contents: no content for a variant of the experiment, and none without a variant',
    );
    // Where it is not a field path, it falls back to `contents`: nothing else is repeated.
    expect(contentMissing('no_default_content', 'Ada Lovelace').detail).toMatch(/^contents: /);
  });
});

describe('outreachRejected', () => {
  const refused = { requestId: 'ats-7731', eventId: randomUUID(), correlationId: 'corr-1' };

  it('given a refusal, then one event keyed by the request id, the same however often it is decided', () => {
    const event = outreachRejected(refused, unknownExperiment, 1_000);
    expect(event).toEqual({
      type: 'OutreachRejected',
      eventId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      occurredAt: 1_000,
      producer: 'planner',
      correlationId: 'corr-1',
      causationId: refused.eventId,
      requestId: 'ats-7731',
      reason: 'unknown_experiment',
      detail: 'experimentId names no experiment',
      sendId: null,
    });
    // A redelivery (another event id, later) or a retried POST is the same rejection.
    expect(outreachRejected({ ...refused, eventId: randomUUID() }, unknownExperiment, 9_000)?.eventId).toBe(
      event?.eventId,
    );
    // Another reason for the same request is another event.
    expect(outreachRejected(refused, invalidRequest(['email']), 1_000)?.eventId).not.toBe(event?.eventId);
  });

  it('given an event id that is no UUID (or none, over HTTP), then no causation id: nothing of it travels', () => {
    expect(outreachRejected({ ...refused, eventId: 'Ada Lovelace' }, unknownExperiment, 0)?.causationId).toBeNull();
    expect(outreachRejected({ ...refused, eventId: '' }, unknownExperiment, 0)?.causationId).toBeNull();
  });

  it('given a request id that cannot travel, then no event: nothing safe to key it by', () => {
    for (const requestId of [
      '',
      '   ',
      'ada@example.com',
      'ada%40example.com',
      'ada\uff20example.com',
      'r\n1',
      'r'.repeat(257),
    ]) {
      expect(addressable(requestId), JSON.stringify(requestId)).toBe(false);
      expect(outreachRejected({ ...refused, requestId }, unknownExperiment, 0)).toBeNull();
    }
    expect(addressable('r'.repeat(256))).toBe(true);
  });
});
