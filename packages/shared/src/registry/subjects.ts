/**
 * Which topics carry the Confluent wire format, and under which subjects their schemas live (ADR 011).
 *
 * Public topics (every topic without PII: what data teams read) use registry ids; internal ones
 * (raw addresses and bodies) keep the self-describing single-object encoding, so the send path and
 * outside producers of `outreach.requested` need no registry. Subjects follow Confluent's
 * TopicRecordNameStrategy, `<topic>-<record full name>`, because one topic carries several event types.
 */
import { schemaDefinitions, type EventType } from '@outreach/contracts';
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

function subjectsOf(specs: readonly TopicSpec[], prefix: string): RegistrySubject[] {
  return specs.flatMap((spec) => {
    const topic = `${prefix}${spec.name}`;
    return spec.eventTypes.map((eventType) => {
      const definition = schemaDefinitions[eventType];
      return {
        subject: subjectName(topic, definition.current),
        topic,
        eventType,
        versions: [...definition.history, definition.current].map(schemaText),
      };
    });
  });
}

/** Every subject of every public topic under `prefix`, with its versions in registration order. */
export function registrySubjects(prefix = ''): RegistrySubject[] {
  return subjectsOf((Object.values(topics) as TopicSpec[]).filter(isPublicTopic), prefix);
}

/**
 * The subjects of the topics other systems publish to, which the platform itself writes in
 * single-object encoding (internal: they carry addresses). Registered too, so that a publisher
 * with a registry-aware serializer (Confluent's, Apicurio's: examples/java-publisher) finds its
 * subject; the planner reads either format, learning an id it first meets from the registry.
 */
export function publisherSubjects(prefix = ''): RegistrySubject[] {
  return subjectsOf([topics.outreachRequested], prefix);
}
