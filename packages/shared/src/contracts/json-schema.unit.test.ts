import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { schemaDefinitions } from '@outreach/contracts';
import { avroFromJson, avroToJsonSchema, type JsonSchema } from './json-schema.js';

const ENVELOPE = ['eventId', 'occurredAt', 'producer', 'correlationId', 'causationId'];
const requested = schemaDefinitions.OutreachRequested.current;

/** Answers 200 with the body as fastify's own Ajv left it, or the 400 it refused it with. */
async function validator(body: JsonSchema) {
  const app = Fastify({ ajv: { customOptions: { removeAdditional: false } } });
  app.post('/', { schema: { body } }, async (request) => request.body);
  await app.ready();
  return async (payload: unknown) => {
    const response = await app.inject({ method: 'POST', url: '/', payload: payload as Record<string, unknown> });
    return { status: response.statusCode, body: response.json() as Record<string, unknown> };
  };
}

const props = (schema: JsonSchema) => schema.properties as Record<string, JsonSchema>;

describe('avroToJsonSchema', () => {
  const body = avroToJsonSchema(requested, { omit: ENVELOPE });
  /** The smallest body the schema takes. */
  const valid = {
    requestId: 'r',
    campaignId: 'c',
    candidateId: 'k',
    email: 'a@example.com',
    step: 'one',
    contents: [{ subject: 's', body: 'b' }],
  };

  it('gives every field but the omitted ones, required unless it has a default or may be null', () => {
    expect(Object.keys(props(body)).sort()).toEqual(
      [
        'campaignId',
        'candidateId',
        'contents',
        'conversationId',
        'email',
        'experimentId',
        'followUps',
        'requestId',
        'sendAt',
        'step',
      ].sort(),
    );
    expect(body.required).toEqual(['requestId', 'campaignId', 'candidateId', 'email', 'step', 'contents']);
    expect(body.additionalProperties).toBe(false);
    expect(props(body).requestId?.description).toMatch(/caller's id/);
  });

  it('lists null first in a union, reads timestamps as date-times and expands named types where they are used', () => {
    expect(props(body).sendAt).toMatchObject({
      anyOf: [{ enum: [null] }, { type: 'string', format: 'date-time' }],
    });
    expect(props(body).experimentId).toMatchObject({ anyOf: [{ enum: [null] }, { type: 'string' }], default: null });
    const followUp = (props(body).followUps?.items ?? {}) as JsonSchema;
    const content = (props(followUp).contents?.items ?? {}) as JsonSchema;
    expect(Object.keys(props(content))).toEqual(['variant', 'subject', 'body']);
    expect(props(followUp).delayMs).toMatchObject({ type: 'integer', maximum: Number.MAX_SAFE_INTEGER });
  });

  it('puts refinements on the path they name, on the non-null branch of a nullable field', () => {
    const refined = avroToJsonSchema(requested, {
      omit: ENVELOPE,
      refine: { experimentId: { maxLength: 64 }, 'followUps[].contents': { minItems: 1 } },
    });
    expect(props(refined).experimentId?.anyOf).toEqual([{ enum: [null] }, { type: 'string', maxLength: 64 }]);
    const followUp = (props(refined).followUps?.items ?? {}) as JsonSchema;
    expect(props(followUp).contents).toMatchObject({ minItems: 1 });
    // The same named type elsewhere is not touched.
    expect(props(refined).contents).not.toHaveProperty('minItems');
  });

  it('refuses a refinement or an omission that names no field, and types with no JSON form', () => {
    expect(() => avroToJsonSchema(requested, { refine: { 'contents[].colour': { maxLength: 1 } } })).toThrow(
      /no field at contents\[\]\.colour/,
    );
    expect(() => avroToJsonSchema(requested, { omit: ['eventID'] })).toThrow(/no field eventID/);
    const withBytes = { type: 'record', name: 'B', fields: [{ name: 'raw', type: 'bytes' }] };
    expect(() => avroToJsonSchema(withBytes)).toThrow(/raw: Avro bytes has no JSON form/);
  });

  it('takes a field added to the schema with a default, without a hand edit', async () => {
    const grown = {
      ...requested,
      fields: [
        ...(requested as { fields: object[] }).fields,
        { name: 'priority', type: ['null', 'string'], default: null, doc: 'How urgent.' },
        { name: 'channel', type: { type: 'enum', name: 'Channel', symbols: ['email', 'sms'] }, default: 'email' },
      ],
    };
    const derived = avroToJsonSchema(grown, { omit: ENVELOPE });
    expect(props(derived).priority).toEqual({
      description: 'How urgent.',
      anyOf: [{ enum: [null] }, { type: 'string' }],
      default: null,
    });
    expect(props(derived).channel).toMatchObject({ type: 'string', enum: ['email', 'sms'], default: 'email' });
    expect(derived.required).not.toContain('priority');
    const fields = avroFromJson<Record<string, unknown>>(grown, { priority: 'high' }, { omit: ENVELOPE });
    expect(fields).toMatchObject({ ok: true, value: { priority: 'high', channel: 'email' } });
  });

  it("is what fastify's Ajv validates with: bounds, unknown fields, null for a string", async () => {
    const post = await validator(avroToJsonSchema(requested, { omit: ENVELOPE, refine: { step: { maxLength: 3 } } }));
    const accepted = await post(valid);
    expect(accepted.status).toBe(200);
    // Defaults filled in by Ajv, null kept null.
    expect(accepted.body).toMatchObject({ experimentId: null, followUps: [], contents: [{ variant: null }] });
    expect((await post({ ...valid, step: 'four' })).body.message).toMatch(/step must NOT have more than 3/);
    expect((await post({ ...valid, extra: 1 })).body.message).toMatch(/additional properties/);
    expect((await post({ ...valid, sendAt: 'tomorrow' })).status).toBe(400);
    expect((await post({ ...valid, experimentId: null })).body).toMatchObject({ experimentId: null });
    expect((await post({ ...valid, followUps: [{ step: 'f', delayMs: 2 ** 53, contents: [] }] })).status).toBe(400);
  });

  it('never coerces into a null branch: an empty string is not "none" (the topic refuses it as empty)', async () => {
    const post = await validator(
      avroToJsonSchema(requested, { omit: ENVELOPE, refine: { conversationId: { minLength: 1 } } }),
    );
    // Ajv turns "" (and 0, false) into null for a `type: "null"` branch: an empty conversationId
    // was taken as none over HTTP, an empty experimentId as no experiment.
    expect((await post({ ...valid, conversationId: '' })).status).toBe(400);
    expect((await post({ ...valid, experimentId: '' })).body).toMatchObject({ experimentId: '' });
    expect((await post({ ...valid, sendAt: 0 })).status).toBe(400);
    expect((await post({ ...valid, conversationId: null })).body).toMatchObject({ conversationId: null });
  });
});

describe('avroFromJson', () => {
  it('fills defaults and nulls, turns date-times into epoch ms and leaves omitted fields out', () => {
    const fields = avroFromJson<Record<string, unknown>>(
      requested,
      {
        requestId: 'r',
        contents: [{ subject: 's', body: 'b' }],
        sendAt: '2030-01-01T00:00:00Z',
        followUps: [{ step: 'f', delayMs: 5, contents: [{ variant: 'A', subject: 's', body: 'b' }] }],
      },
      { omit: ENVELOPE },
    );
    expect(fields).toEqual({
      ok: true,
      value: {
        requestId: 'r',
        experimentId: null,
        contents: [{ variant: null, subject: 's', body: 'b' }],
        sendAt: Date.parse('2030-01-01T00:00:00Z'),
        conversationId: null,
        followUps: [{ step: 'f', delayMs: 5, contents: [{ variant: 'A', subject: 's', body: 'b' }] }],
      },
    });
  });

  it('gives a reason for a date-time Date cannot hold', () => {
    expect(avroFromJson(requested, { sendAt: '2030-12-31T23:59:60Z' }, { omit: ENVELOPE })).toEqual({
      ok: false,
      reason: 'sendAt is not a representable date-time',
    });
  });
});
