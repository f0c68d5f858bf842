/**
 * Other teams' Avro libraries must accept our bytes unchanged. Apache Avro for Java decodes every
 * event type as we encode it, with only the .avsc files: single-object header, CRC-64-AVRO
 * fingerprint of the Parsing Canonical Form, body. (Single-object encoding is what internal topics
 * carry, and public ones with EVENT_WIRE_FORMAT=single-object; the Confluent wire format of public
 * topics is read by Kafka Connect's registry-aware converter in its own test.)
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventCodec, eventTypes, schemaDefinitions, type OutreachEvent } from '@outreach/contracts';
import avro from 'avsc';
import { describe, expect, it } from 'vitest';
import { ensureMavenLibs, infraDir } from '../../scripts/infra.js';

const root = join(import.meta.dirname, '..', '..');
const hasJava = !spawnSync('java', ['-version']).error;

describe.skipIf(!hasJava)('Apache Avro for Java', () => {
  it('decodes every event type exactly as encoded here', () => {
    const libs = ensureMavenLibs(join(root, 'infra', 'avro-interop', 'pom.xml'), join(infraDir, 'avro', 'libs'));
    const events: OutreachEvent[] = eventTypes.flatMap(
      (type) =>
        Array.from({ length: 3 }, () => ({
          type,
          ...(avro.Type.forSchema(schemaDefinitions[type].current as avro.Schema).random() as object),
        })) as OutreachEvent[],
    );
    // A codec of its own, bound to no registry: single-object encoding for every type, whatever
    // format the run's shared codec writes public topics in.
    const codec = new EventCodec(schemaDefinitions);
    const input = join(mkdtempSync(join(tmpdir(), 'interop-')), 'messages.hex');
    writeFileSync(input, events.map((e) => codec.encode(e).toString('hex')).join('\n'));

    const output = execFileSync(
      'java',
      ['-cp', `${libs}/*`, join(root, 'test', 'interop', 'DecodeEvents.java'), join(root, 'schemas'), input],
      {
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    const lines = output.trim().split('\n');
    expect(lines).toHaveLength(events.length);
    lines.forEach((line, i) => {
      const event = events[i] as OutreachEvent;
      const space = line.indexOf(' ');
      expect(line.slice(0, space)).toBe(`outreach.events.${event.type}`);
      const decoded = JSON.parse(line.slice(space + 1)) as Record<string, unknown>;
      const { type: _type, ...fields } = event;
      // Java renders strings, longs, enums and nested records as JSON; nullable unions unwrap to the value.
      expect(decoded).toEqual(JSON.parse(JSON.stringify(fields)));
    });
  }, 180_000);
});
