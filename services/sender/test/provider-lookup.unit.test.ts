/**
 * The delivery lookup's pure parts: the reconciler's rule (found / not found / unavailable, against
 * the hand-over bound and the settle time), the strict reading of Mailpit's and Mailgun's answers,
 * and Mailgun's send verdicts by what the exchange established. The adapters against real servers
 * are in mailpit-lookup.int.test.ts and mailgun.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { HttpOutcome } from '../src/adapters/providers/http-call.js';
import {
  bareMessageId,
  decideAfterLookup,
  lookupOfProvider,
  searchableMessageId,
  type LookupResult,
  type LookupTiming,
} from '../src/adapters/providers/lookup.js';
import { interpretSearch } from '../src/adapters/providers/mailpit-lookup.js';
import { interpretEvents, messageFields, multipart, sendVerdict } from '../src/adapters/providers/mailgun.js';
import { NullProvider } from '../src/adapters/providers/null.js';

const started = new Date('2026-03-01T10:00:00Z');
const at = (ms: number) => new Date(started.getTime() + ms);
const timing = (elapsedMs: number, extra: Partial<LookupTiming> = {}): LookupTiming => ({
  attemptStartedAt: started,
  handoverWithinMs: 20_000,
  settleMs: 5_000,
  now: at(elapsedMs),
  recheckMs: 10_000,
  ...extra,
});
const found: LookupResult = { kind: 'found', providerId: 'p-1' };
const notFound: LookupResult = { kind: 'not_found' };
const unavailable: LookupResult = { kind: 'unavailable', reason: 'mailpit http 503' };

describe('decideAfterLookup (the reconciler rule)', () => {
  it('given the provider holds the message, when asked at any time, then the send is sent', () => {
    expect(decideAfterLookup(found, timing(0))).toEqual({ verdict: 'sent', providerId: 'p-1' });
    expect(decideAfterLookup({ kind: 'found' }, timing(10 * 86_400_000))).toEqual({ verdict: 'sent' });
  });

  it('given not found before the hand-over bound plus the settle time, then wait until exactly then', () => {
    const decision = decideAfterLookup(notFound, timing(24_999));
    expect(decision).toMatchObject({ verdict: 'wait', until: at(25_000) });
    // Past the settle time but inside the hand-over bound is still too early.
    expect(decideAfterLookup(notFound, timing(19_000, { settleMs: 0 }))).toMatchObject({ verdict: 'wait' });
  });

  it('given not found once the hand-over bound and the settle time have passed, then a retry is safe', () => {
    expect(decideAfterLookup(notFound, timing(25_000))).toEqual({ verdict: 'retry' });
    expect(decideAfterLookup(notFound, timing(3_600_000))).toEqual({ verdict: 'retry' });
  });

  it('given the lookup is unavailable, then never a retry: wait and ask again, however late it is', () => {
    for (const elapsed of [0, 25_000, 86_400_000]) {
      const decision = decideAfterLookup(unavailable, timing(elapsed));
      expect(decision).toEqual({
        verdict: 'wait',
        until: at(elapsed + 10_000),
        reason: 'lookup unavailable: mailpit http 503',
      });
    }
  });

  it('given the lookup stays unavailable past the give-up time, then the send is ambiguous (an operator decides)', () => {
    expect(decideAfterLookup(unavailable, timing(59_999, { giveUpAfterMs: 60_000 })).verdict).toBe('wait');
    expect(decideAfterLookup(unavailable, timing(60_000, { giveUpAfterMs: 60_000 }))).toEqual({
      verdict: 'ambiguous',
      reason: 'lookup unavailable: mailpit http 503',
    });
    // The give-up time never turns a not-found into anything but its own rule.
    expect(decideAfterLookup(notFound, timing(60_000, { giveUpAfterMs: 1 })).verdict).toBe('retry');
  });

  it('given a clock that runs backwards (attempt in the future), then not found waits', () => {
    expect(decideAfterLookup(notFound, timing(-5_000)).verdict).toBe('wait');
  });

  it('given unusable timing (invalid dates, negative or infinite durations), then ambiguous, never retry', () => {
    const broken: Array<Partial<LookupTiming>> = [
      { attemptStartedAt: new Date(Number.NaN) },
      { now: new Date(Number.NaN) },
      { settleMs: -1 },
      { handoverWithinMs: Number.NaN },
      { settleMs: Number.POSITIVE_INFINITY },
      { recheckMs: -5 },
    ];
    for (const extra of broken) {
      expect(decideAfterLookup(notFound, timing(1_000_000, extra)).verdict).toBe('ambiguous');
    }
  });
});

describe('Message-IDs for a search', () => {
  it('strips the brackets and refuses ids a search syntax would mangle', () => {
    expect(bareMessageId(' <abc@x.test> ')).toBe('abc@x.test');
    expect(searchableMessageId('<6f1c2d3e-0000-4000-8000-000000000001@outreach.local>')).toBe(
      '6f1c2d3e-0000-4000-8000-000000000001@outreach.local',
    );
    for (const bad of ['<a b@x>', '<"q"@x>', '<no-at-sign>', '<a@x>,<b@x>', '<a(b)@x>', '<a;b@x>', '<>', '']) {
      expect(searchableMessageId(bad), bad).toBeUndefined();
    }
  });
});

const response = (status: number, body: unknown): HttpOutcome => ({
  kind: 'response',
  status,
  body: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
});
const summary = (id: string, messageId: string, to = 'ada@example.com') => ({
  ID: id,
  MessageID: messageId,
  Created: '2026-03-01T10:00:01.123456789Z',
  To: [{ Name: '', Address: to }],
  Cc: [],
  Bcc: null,
});

describe('interpretSearch (Mailpit)', () => {
  const id = 's-1@outreach.local';

  it('found only on an exact MessageID, with its database ID and time', () => {
    const result = interpretSearch(
      response(200, { messages_count: 2, messages: [summary('A', `x${id}`), summary('B', id)] }),
      id,
      'Ada@Example.com',
    );
    expect(result).toEqual({ kind: 'found', providerId: 'B', at: new Date('2026-03-01T10:00:01.123Z') });
  });

  it('not found only on a complete answer without our id', () => {
    expect(interpretSearch(response(200, { messages_count: 1, messages: [summary('A', `x${id}`)] }), id)).toEqual({
      kind: 'not_found',
    });
    expect(interpretSearch(response(200, { messages_count: 0, messages: [] }), id)).toEqual({ kind: 'not_found' });
    // 51 matched, 50 returned, none ours: the one not returned may be.
    expect(interpretSearch(response(200, { messages_count: 51, messages: [summary('A', `x${id}`)] }), id).kind).toBe(
      'unavailable',
    );
  });

  it('our id on a message to someone else is neither found nor not found', () => {
    expect(
      interpretSearch(response(200, { messages_count: 1, messages: [summary('B', id)] }), id, 'bob@x.test'),
    ).toEqual({ kind: 'unavailable', reason: 'mailpit message id found for another recipient' });
  });

  it('anything but a documented 200 answer is unavailable, never not found', () => {
    const outcomes: HttpOutcome[] = [
      response(500, { messages_count: 0, messages: [] }),
      response(401, 'Unauthorised'),
      response(200, '{"messages": [ <garbage'),
      response(200, []),
      response(200, { messages: [] }),
      response(200, { messages_count: -1, messages: [] }),
      response(200, { messages_count: 1.5, messages: [] }),
      response(200, { messages_count: 1, messages: [{ ID: 1, MessageID: id }] }),
      response(200, { messages_count: 1, messages: [{ ...summary('B', id), To: 'ada@example.com' }] }),
      { kind: 'too_large', status: 200 },
      { kind: 'timeout', phase: 'response' },
      { kind: 'failed', phase: 'request', code: 'ECONNREFUSED' },
    ];
    for (const outcome of outcomes)
      expect(interpretSearch(outcome, id).kind, JSON.stringify(outcome)).toBe('unavailable');
  });
});

const event = (messageId: string, extra: Record<string, unknown> = {}) => ({
  id: 'e1',
  event: 'accepted',
  timestamp: 1_772_359_200.5,
  recipient: 'ada@example.com',
  message: { headers: { 'message-id': messageId } },
  ...extra,
});

describe('interpretEvents (Mailgun)', () => {
  const id = 's-1@outreach.local';

  it('found on an event that says Mailgun took our message', () => {
    for (const name of ['accepted', 'delivered', 'failed']) {
      expect(interpretEvents(response(200, { items: [event(id, { event: name })] }), id, 'ada@example.com')).toEqual({
        kind: 'found',
        providerId: id,
        at: new Date(1_772_359_200_500),
      });
    }
  });

  it('a rejected event, or events for another id the server let through, are not ours: not found', () => {
    const items = [event(id, { event: 'rejected' }), event(`x${id}`), event(`<${id}x>`)];
    expect(interpretEvents(response(200, { items, paging: {} }), id)).toEqual({ kind: 'not_found' });
  });

  it('a full page without our event, or ours for another recipient, is unavailable', () => {
    const page = Array.from({ length: 300 }, () => event(`x${id}`));
    expect(interpretEvents(response(200, { items: page }), id).kind).toBe('unavailable');
    expect(interpretEvents(response(200, { items: [event(id)] }), id, 'bob@x.test').kind).toBe('unavailable');
  });

  it('anything but a documented 200 event list is unavailable', () => {
    const outcomes: HttpOutcome[] = [
      response(401, 'Forbidden'),
      response(500, { items: [] }),
      response(200, 'not json'),
      response(200, { items: 'none' }),
      response(200, { items: [event(id, { timestamp: 'yesterday' })] }),
      response(200, { items: [{ event: 'accepted', timestamp: 1 }] }),
      response(200, { items: [null] }),
      { kind: 'too_large', status: 200 },
      { kind: 'timeout', phase: 'response' },
    ];
    for (const outcome of outcomes)
      expect(interpretEvents(outcome, id).kind, JSON.stringify(outcome)).toBe('unavailable');
  });
});

describe('sendVerdict (Mailgun send)', () => {
  const id = '<s-1@outreach.local>';
  const verdict = (outcome: HttpOutcome) => sendVerdict(outcome, id);

  it('2xx is sent whatever the body is; the provider id is the one it returned, else ours', () => {
    expect(verdict(response(200, { id: '<mg-1@x>', message: 'Queued. Thank you.' }))).toEqual({
      kind: 'sent',
      providerMessageId: '<mg-1@x>',
    });
    expect(verdict(response(200, 'garbage'))).toEqual({ kind: 'sent', providerMessageId: id });
    expect(verdict({ kind: 'too_large', status: 200 }).kind).toBe('sent');
    expect(verdict({ kind: 'failed', phase: 'response', code: 'ECONNRESET', status: 200 }).kind).toBe('sent');
    expect(verdict({ kind: 'timeout', phase: 'response', status: 202 }).kind).toBe('sent');
  });

  it('maps statuses: message refusals rejected, config and load not_sent, gateways unknown', () => {
    const table: Array<[number, string]> = [
      [400, 'rejected'],
      [413, 'rejected'],
      [422, 'rejected'],
      [401, 'not_sent'],
      [403, 'not_sent'],
      [404, 'not_sent'],
      [408, 'not_sent'],
      [429, 'not_sent'],
      [500, 'not_sent'],
      [503, 'not_sent'],
      [502, 'unknown'],
      [504, 'unknown'],
      [302, 'unknown'],
    ];
    for (const [status, kind] of table) {
      const result = verdict(response(status, { message: 'ada@example.com is not allowed' }));
      expect(result.kind, String(status)).toBe(kind);
      // Reasons are codes: no reply text (which may quote an address) travels on.
      if (result.kind !== 'sent') expect(result.reason).not.toContain('@');
    }
  });

  it('no status: before the request was handed over not_sent, after it unknown', () => {
    expect(verdict({ kind: 'failed', phase: 'request', code: 'ECONNREFUSED' }).kind).toBe('not_sent');
    expect(verdict({ kind: 'timeout', phase: 'request' }).kind).toBe('not_sent');
    expect(verdict({ kind: 'failed', phase: 'response', code: 'ECONNRESET' }).kind).toBe('unknown');
    expect(verdict({ kind: 'timeout', phase: 'response' }).kind).toBe('unknown');
  });
});

describe('the Mailgun request body', () => {
  const message = {
    from: 'Outreach <outreach@example.com>',
    to: 'ada@example.com',
    subject: 'Hello',
    text: 'Line one\r\n--not-a-boundary\r\nline three',
    headers: { 'List-Unsubscribe': '<mailto:u@example.com>' },
    messageId: '<s-1@outreach.local>',
  };

  it('is multipart/form-data that a standard parser reads back field for field', async () => {
    const fields = messageFields(message, 's-1');
    if (typeof fields === 'string') throw new Error(fields);
    const { body, contentType } = multipart(fields);
    const form = await new Request('http://x/', {
      method: 'POST',
      headers: { 'content-type': contentType },
      body,
    }).formData();
    expect(Object.fromEntries(form.entries())).toEqual({
      from: message.from,
      to: message.to,
      subject: 'Hello',
      text: message.text,
      'h:Message-Id': '<s-1@outreach.local>',
      'v:send-id': 's-1',
      'h:List-Unsubscribe': '<mailto:u@example.com>',
    });
  });

  it('refuses what would change the message: header injection, several recipients, a bad header name', () => {
    expect(messageFields({ ...message, subject: 'Hi\r\nBcc: x@y' }, 's')).toBeTypeOf('string');
    expect(messageFields({ ...message, to: 'ada@example.com, eve@example.com' }, 's')).toBeTypeOf('string');
    expect(messageFields({ ...message, headers: { 'X-A: b\r\nX-C': 'd' } }, 's')).toBeTypeOf('string');
    expect(messageFields({ ...message, headers: { 'X-A': 'b\nc' } }, 's')).toBeTypeOf('string');
  });
});

describe('lookupOfProvider (the older MailProvider.lookup through the port)', () => {
  it("takes the null provider's memory as found, and its 'unknown' as unavailable, never not found", async () => {
    const provider = new NullProvider();
    await provider.send({ from: 'a@x', to: 'b@x', subject: 's', text: 't', headers: {}, messageId: '<k-1@x>' }, 'k-1');
    const lookup = lookupOfProvider(provider, (bare) => bare.split('@')[0] ?? '');
    expect(await lookup?.find({ messageId: '<k-1@outreach.local>' })).toEqual({ kind: 'found' });
    expect((await lookup?.find({ messageId: '<k-2@outreach.local>' }))?.kind).toBe('unavailable');
    await provider.close();
  });
});
