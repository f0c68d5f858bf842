/**
 * The committed API contracts (docs/api/) as CI checks them: each is what the code generates now
 * (`npm run specs:gen` writes them), each OpenAPI document passes the OpenAPI validator, and the
 * AsyncAPI document passes the official AsyncAPI parser with its Avro schema parser.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import SwaggerParser from '@apidevtools/swagger-parser';
import { AvroSchemaParser } from '@asyncapi/avro-schema-parser';
import { Parser } from '@asyncapi/parser';
import { asyncApiDocument, DEAD_LETTER_HEADERS, eventHeaders, topics } from '@outreach/shared';
import { schemaDefinitions, type OutreachRequested } from '@outreach/contracts';
import { parse } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { asyncApiFile, asyncApiText, generated, openApiFile, services } from '../scripts/specs.js';

const root = join(import.meta.dirname, '..');
let fresh: Array<{ file: string; text: string }>;

beforeAll(() => {
  fresh = generated();
}, 120_000);

/** Diagnostics at error (0) or warning (1) level: information and hints do not fail the document. */
async function asyncApiProblems(text: string): Promise<string[]> {
  const parser = new Parser();
  parser.registerSchemaParser(AvroSchemaParser());
  const { diagnostics } = await parser.parse(text);
  return diagnostics.filter((d) => d.severity <= 1).map((d) => `${d.code} at ${d.path.join('.')}: ${d.message}`);
}

describe('docs/api', () => {
  it('is what the code generates (run `npm run specs:gen`)', () => {
    expect(fresh).toHaveLength(services().length + 1);
    for (const { file, text } of fresh) expect(readFileSync(file, 'utf8'), file).toBe(text);
  });

  it.each(['planner', 'sender', 'experiment', 'liveness'])(
    '%s.openapi.json is valid OpenAPI 3.1, and every operation names its scope and the token for it',
    async (service) => {
      const text = readFileSync(openApiFile(service), 'utf8');
      const document = JSON.parse(text) as { openapi: string; paths: Record<string, Record<string, unknown>> };
      expect(document.openapi).toBe('3.1.0');
      // validate() dereferences in place: give it a copy.
      await expect(SwaggerParser.validate(structuredClone(document) as never)).resolves.toBeDefined();
      const operations = Object.values(document.paths).flatMap((ops) => Object.values(ops)) as Array<{
        'x-scope': string;
        security: Array<Record<string, string[]>>;
      }>;
      expect(operations.length).toBeGreaterThan(3);
      for (const operation of operations) {
        if (operation['x-scope'] === 'public') expect(operation.security).toEqual([]);
        else expect(operation.security).toEqual([{ [`${operation['x-scope']}Token`]: [] }]);
      }
      expect(Object.keys(document.paths)).toContain('/health/ready');
    },
  );

  it('fails the OpenAPI validator on a broken document, so the check above can fail', async () => {
    const document = JSON.parse(readFileSync(openApiFile('planner'), 'utf8')) as { paths: Record<string, unknown> };
    document.paths['/broken'] = { get: { responses: 'none' } };
    await expect(SwaggerParser.validate(document as never)).rejects.toThrow();
  });
});

describe('docs/api/asyncapi.yaml', () => {
  const document = parse(asyncApiText()) as {
    channels: Record<
      string,
      { address: string; messages: Record<string, unknown>; bindings: { kafka: Record<string, unknown> } }
    >;
    components: {
      messages: Record<string, { headers: { properties: Record<string, unknown> } }>;
      schemas: Record<string, { schema: unknown }>;
    };
  };

  it('passes the AsyncAPI parser, Avro payloads included', async () => {
    expect(await asyncApiProblems(readFileSync(asyncApiFile, 'utf8'))).toEqual([]);
  });

  it('fails the parser when a payload is not Avro, so the check above can fail', async () => {
    const broken = asyncApiDocument({ replicas: 3 }) as {
      components: { schemas: Record<string, { schema: unknown }> };
    };
    (broken.components.schemas.SendRecorded as { schema: unknown }).schema = { type: 'record', name: 'X', fields: 7 };
    expect((await asyncApiProblems(JSON.stringify(broken))).join('\n')).toMatch(/SendRecorded/);
  });

  it('has a channel per topic and per dead-letter topic, with the partitions and key the code uses', () => {
    for (const spec of Object.values(topics)) {
      const channel = Object.values(document.channels).find((c) => c.address === spec.name);
      expect(channel, spec.name).toBeDefined();
      expect(channel?.bindings.kafka).toMatchObject({ topic: spec.name, partitions: spec.partitions, replicas: 3 });
      expect(Object.keys(channel?.messages ?? {}).sort()).toEqual([...spec.eventTypes].sort());
      expect(Object.values(document.channels).some((c) => c.address === `${spec.name}.dlq`)).toBe(true);
    }
  });

  it('carries each Avro schema as it is, and the headers the producer writes', () => {
    for (const [type, definition] of Object.entries(schemaDefinitions)) {
      expect(document.components.schemas[type]?.schema, type).toEqual(definition.current);
    }
    const event = { type: 'OutreachRequested', eventId: '00000000-0000-4000-8000-000000000001', correlationId: 'c' };
    const written = Object.keys(eventHeaders(event as OutreachRequested)).sort();
    expect(Object.keys(document.components.messages.OutreachRequested?.headers.properties ?? {}).sort()).toEqual(
      written,
    );
    // The dead-letter headers are the consumer's own names.
    const consumer = readFileSync(join(root, 'packages/shared/src/kafka/consumer.ts'), 'utf8');
    for (const name of Object.keys(DEAD_LETTER_HEADERS)) expect(consumer, name).toContain(`'${name}'`);
  });
});
