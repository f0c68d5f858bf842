/**
 * The `kafka.strimzi.io/v1` schemas of KafkaUser and KafkaTopic, as Strimzi 1.0's CRDs declare them
 * (packaging/install/cluster-operator/043-Crd-kafkatopic.yaml and 044-Crd-kafkauser.yaml of
 * strimzi/strimzi-kafka-operator; the v1 changes are Strimzi proposal 112). Against v1beta2: `spec` is
 * required; an ACL rule's `operation` is gone and `operations` is required. Unknown fields are refused
 * here, where the API server would prune them silently (a misspelt `patternType` would grant the
 * default, literal). kubernetes-models has no Strimzi kinds, so the deployment tests validate with these.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const literals = (values: readonly string[]) => Type.Union(values.map((v) => Type.Literal(v)));
const strict = { additionalProperties: false } as const;

const metadata = Type.Object({
  name: Type.String({ minLength: 1 }),
  namespace: Type.Optional(Type.String()),
  labels: Type.Optional(Type.Record(Type.String(), Type.String())),
  annotations: Type.Optional(Type.Record(Type.String(), Type.String())),
});

const aclRule = Type.Object(
  {
    type: Type.Optional(literals(['allow', 'deny'])),
    resource: Type.Object(
      {
        type: literals(['topic', 'group', 'cluster', 'transactionalId']),
        name: Type.Optional(Type.String()),
        patternType: Type.Optional(literals(['literal', 'prefix'])),
      },
      strict,
    ),
    host: Type.Optional(Type.String()),
    operations: Type.Array(
      literals([
        'Read',
        'Write',
        'Create',
        'Delete',
        'Alter',
        'Describe',
        'ClusterAction',
        'AlterConfigs',
        'DescribeConfigs',
        'IdempotentWrite',
        'All',
      ]),
      { minItems: 1 },
    ),
  },
  strict,
);

export const KafkaUserV1 = Type.Object({
  apiVersion: Type.Literal('kafka.strimzi.io/v1'),
  kind: Type.Literal('KafkaUser'),
  metadata,
  spec: Type.Object(
    {
      userName: Type.Optional(Type.String()),
      authentication: Type.Optional(
        Type.Object(
          {
            type: literals(['tls', 'tls-external', 'scram-sha-512']),
            password: Type.Optional(Type.Object({ valueFrom: Type.Object({ secretKeyRef: Type.Unknown() }) })),
          },
          strict,
        ),
      ),
      authorization: Type.Optional(Type.Object({ type: Type.Literal('simple'), acls: Type.Array(aclRule) }, strict)),
      quotas: Type.Optional(
        Type.Object(
          {
            producerByteRate: Type.Optional(Type.Integer({ minimum: 0 })),
            consumerByteRate: Type.Optional(Type.Integer({ minimum: 0 })),
            requestPercentage: Type.Optional(Type.Integer({ minimum: 0 })),
            controllerMutationRate: Type.Optional(Type.Number({ minimum: 0 })),
          },
          strict,
        ),
      ),
      template: Type.Optional(Type.Unknown()),
    },
    strict,
  ),
});

export const KafkaTopicV1 = Type.Object({
  apiVersion: Type.Literal('kafka.strimzi.io/v1'),
  kind: Type.Literal('KafkaTopic'),
  metadata,
  spec: Type.Object(
    {
      partitions: Type.Optional(Type.Integer({ minimum: 1 })),
      replicas: Type.Optional(Type.Integer({ minimum: 1, maximum: 32767 })),
      config: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
      topicName: Type.Optional(Type.String()),
    },
    strict,
  ),
});

const schemas: Record<string, TSchema> = { KafkaUser: KafkaUserV1, KafkaTopic: KafkaTopicV1 };

/** What is wrong with a Strimzi resource against its v1 schema, one line per error; [] when valid. */
export function strimziSchemaErrors(object: { kind?: string }): string[] {
  const schema = object.kind ? schemas[object.kind] : undefined;
  if (!schema) return [`no kafka.strimzi.io/v1 schema for kind ${object.kind ?? '(none)'} here`];
  return [...Value.Errors(schema, object)].map((e) => `${e.path || '/'}: ${e.message}`);
}
