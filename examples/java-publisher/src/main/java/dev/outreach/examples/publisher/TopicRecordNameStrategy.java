package dev.outreach.examples.publisher;

import io.apicurio.registry.resolver.ParsedSchema;
import io.apicurio.registry.resolver.data.Record;
import io.apicurio.registry.resolver.strategy.ArtifactReference;
import io.apicurio.registry.resolver.strategy.ArtifactReferenceResolverStrategy;
import io.apicurio.registry.serde.data.KafkaSerdeRecord;
import org.apache.avro.Schema;

/**
 * Confluent's TopicRecordNameStrategy for Apicurio's serdes: the subject {@code <topic>-<record full
 * name>} (for example {@code outreach.requested.v1-outreach.events.OutreachRequested}), in the group
 * where Apicurio's Confluent-compatible API keeps its subjects ("default"). The platform registers
 * its schemas under these subjects, one topic carrying several record types.
 *
 * <p>Apicurio 2.6's own {@code TopicRecordIdStrategy} names the artifact {@code <topic>-<name>} in the
 * group {@code <namespace>}, which is not the subject; and its topic strategies do not ask for the
 * record's schema, so a look-up by content sends the schema split into references, which the registry
 * does not match against the whole schema it holds. This one asks for the schema ({@link #loadSchema}).
 */
public final class TopicRecordNameStrategy implements ArtifactReferenceResolverStrategy<Schema, Object> {
  /** Apicurio's Confluent-compatible API (/apis/ccompat/v7) keeps subjects in this group. */
  public static final String CCOMPAT_GROUP = "default";

  @Override
  public ArtifactReference artifactReference(Record<Object> data, ParsedSchema<Schema> parsedSchema) {
    String topic = ((KafkaSerdeRecord<Object>) data).metadata().getTopic();
    return ArtifactReference.builder()
        .groupId(CCOMPAT_GROUP)
        .artifactId(topic + "-" + parsedSchema.getParsedSchema().getFullName())
        .build();
  }

  @Override
  public boolean loadSchema() {
    return true;
  }
}
