/**
 * Which topics carry the Confluent wire format, and under which subjects their schemas live (ADR 011).
 *
 * Public topics (every topic without PII: what data teams read) use registry ids; internal ones
 * (raw addresses and bodies) keep the self-describing single-object encoding, so the send path and
 * outside producers of `outreach.requested` need no registry. Subjects follow Confluent's
 * TopicRecordNameStrategy, `<topic>-<record full name>`, because one topic carries several event types.
 */
import { schemaDefinitions, type EventType } from '../contracts/events.generated.js';
import { topics, type TopicSpec } from '../kafka/topics.js';

export type WireFormat = 'confluent' | 'single-object';

export interface RegistrySubject {
  readonly subject: string;
  readonly topic: string;
  readonly eventType: EventType;
  /** Versions to register, oldest first; the last is the current schema. JSON text, canonical form. */
  readonly versions: readonly string[];
}

/** A topic data teams read: its events carry no raw address or body. */
export function isPublicTopic(spec: TopicSpec): boolean {
  return !spec.pii;
}

/** TopicRecordNameStrategy. */
export function subjectName(topic: string, schema: object): string {
  const { name, namespace } = schema as { name: string; namespace?: string };
  return `${topic}-${namespace && !name.includes('.') ? `${namespace}.${name}` : name}`;
}

/**
 * The text we register: the schema's JSON as in schemas/, serialized the same way every time, so a
 * rerun finds the same version. Not the Parsing Canonical Form: it drops `default`, on which the
 * registry's compatibility check (and every reader's resolution) depends.
 */
export function schemaText(schema: object): string {
  return JSON.stringify(schema);
}

/** Every subject of every public topic under `prefix`, with its versions in registration order. */
export function registrySubjects(prefix = ''): RegistrySubject[] {
  const result: RegistrySubject[] = [];
  for (const spec of Object.values(topics) as TopicSpec[]) {
    if (!isPublicTopic(spec)) continue;
    const topic = `${prefix}${spec.name}`;
    for (const eventType of spec.eventTypes) {
      const definition = schemaDefinitions[eventType];
      result.push({
        subject: subjectName(topic, definition.current),
        topic,
        eventType,
        versions: [...definition.history, definition.current].map(schemaText),
      });
    }
  }
  return result;
}
