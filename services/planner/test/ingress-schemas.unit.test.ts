/**
 * The HTTP bodies of the planner's ingress routes are derived from the Avro schemas: a field added
 * to an .avsc is in the body schema (and so in the OpenAPI) without a hand edit, and the bounds the
 * edge adds stay on the fields they name.
 */
import { type JsonSchema } from '@outreach/shared';
import { schemaDefinitions } from '@outreach/contracts';
import { describe, expect, it } from 'vitest';
import { conversationEventBody } from '../src/routes/v1/conversation-events.js';
import { outreachRequestBody } from '../src/routes/v1/outreach-requests.js';
// The app's decorations the routes use are declared (module augmentation) with the plugin that adds them.
import type {} from '../src/plugins/planner.js';

const props = (schema: unknown) => (schema as { properties: Record<string, JsonSchema> }).properties;
const grow = <T extends object>(schema: T, field: object): T => ({
  ...schema,
  fields: [...(schema as unknown as { fields: object[] }).fields, field],
});

describe('POST /v1/outreach-requests body', () => {
  it('is OutreachRequested.avsc without the envelope, with the edge bounds', () => {
    const body = outreachRequestBody();
    expect(Object.keys(props(body))).toEqual([
      'requestId',
      'campaignId',
      'candidateId',
      'email',
      'step',
      'experimentId',
      'contents',
      'sendAt',
      'conversationId',
      'followUps',
    ]);
    expect(body.required).toEqual(['requestId', 'campaignId', 'candidateId', 'email', 'step', 'contents']);
    expect(props(body).email).toMatchObject({ type: 'string', maxLength: 320 });
    expect(props(body).conversationId?.anyOf).toEqual([
      { enum: [null] },
      { type: 'string', minLength: 1, maxLength: 1024 },
    ]);
    expect(props(body).contents).toMatchObject({ minItems: 1, maxItems: 20 });
    const followUp = props(body).followUps?.items;
    expect(props(followUp).delayMs).toMatchObject({ type: 'integer', minimum: 1, maximum: 366 * 24 * 3_600_000 });
    expect(props(props(followUp).contents?.items).variant?.anyOf).toEqual([
      { enum: [null] },
      { type: 'string', maxLength: 64 },
    ]);
  });

  it('takes a new optional field of the schema without a hand edit', () => {
    const grown = grow(schemaDefinitions.OutreachRequested.current, {
      name: 'priority',
      type: ['null', 'string'],
      default: null,
      doc: 'How urgent the request is.',
    });
    const body = outreachRequestBody(grown);
    expect(props(body).priority).toEqual({
      description: 'How urgent the request is.',
      anyOf: [{ enum: [null] }, { type: 'string' }],
      default: null,
    });
    expect(body.required).not.toContain('priority');
  });
});

describe('POST /v1/conversations/:conversationId/events body', () => {
  const branches = (body: { oneOf: JsonSchema[] }) =>
    Object.fromEntries(body.oneOf.map((b) => [(props(b).type as { const: string }).const, b]));

  it('is one shape per event type, each its .avsc without what the platform fills in', () => {
    const body = conversationEventBody();
    expect(body.discriminator).toEqual({ propertyName: 'type' });
    const byType = branches(body);
    expect(Object.keys(byType)).toEqual(['MessageReceived', 'ConversationClosed', 'StepCompleted']);
    expect(Object.keys(props(byType.MessageReceived))).toEqual([
      'type',
      'eventId',
      'campaignId',
      'candidateKey',
      'messageId',
    ]);
    expect(byType.StepCompleted?.required).toEqual(['type', 'campaignId', 'candidateKey', 'stepId']);
    expect(props(byType.ConversationClosed).eventId).toMatchObject({ type: 'string', format: 'uuid' });
    expect(byType.ConversationClosed?.additionalProperties).toBe(false);
  });

  it('takes a new optional field of one of the schemas without a hand edit', () => {
    const grown = {
      ...schemaDefinitions,
      MessageReceived: {
        current: grow(schemaDefinitions.MessageReceived.current, {
          name: 'channel',
          type: ['null', 'string'],
          default: null,
        }),
      },
    };
    const message = branches(conversationEventBody(grown)).MessageReceived;
    expect(props(message).channel).toMatchObject({ anyOf: [{ enum: [null] }, { type: 'string' }], default: null });
    expect(message?.required).not.toContain('channel');
  });
});
