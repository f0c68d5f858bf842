import dev.outreach.examples.publisher.TopicRecordNameStrategy;
import io.apicurio.registry.resolver.SchemaResolverConfig;
import io.apicurio.registry.serde.SerdeConfig;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A Java publisher gone wrong, on the same stack as examples/java-publisher (kafka-clients, Apicurio's
 * serializer in the Confluent wire format): test/int/java-publisher.int.test.ts runs it with
 * `java -cp <the example's jar and libs> HostilePublisher.java` and expects the planner to dead-letter
 * every record it gets through, and to keep running.
 *
 * <ul>
 *   <li>{@code unknown-id}: a valid OutreachRequested body behind a schema id no registry gave out;
 *   <li>{@code foreign-record}: a record of someone else's schema, auto-registered by the serializer
 *       under its own subject, so the registry knows the id but the platform has no such event type;
 *   <li>{@code impostor-at-subject}: a schema named outreach.events.OutreachRequested with other
 *       fields, auto-registered under the real subject: the registry's FULL_TRANSITIVE rule refuses it
 *       and the serializer throws (nothing reaches Kafka);
 *   <li>{@code impostor}: the same schema registered under a subject of its own: it gets an id, and the
 *       platform cannot read it as an OutreachRequested;
 *   <li>{@code truncated}: the real schema's id with half a body.
 * </ul>
 *
 * Prints {@code sent <case> <partition>:<offset>} or {@code refused <case> <reason>} per case. Keys are
 * {@code attack-<case>}. Environment: KAFKA_BROKERS, REGISTRY_URL (Apicurio's v2 API), TOPIC, and
 * KNOWN_ID (the registry id of the real OutreachRequested schema).
 */
public final class HostilePublisher {
  private static final String FOREIGN =
      "{\"type\":\"record\",\"name\":\"Payload\",\"namespace\":\"com.attacker\","
          + "\"fields\":[{\"name\":\"requestId\",\"type\":\"string\"}]}";
  private static final String IMPOSTOR =
      "{\"type\":\"record\",\"name\":\"OutreachRequested\",\"namespace\":\"outreach.events\","
          + "\"fields\":[{\"name\":\"requestId\",\"type\":\"string\"},{\"name\":\"email\",\"type\":\"int\"}]}";

  public static void main(String[] args) throws Exception {
    String topic = System.getenv("TOPIC");
    int knownId = Integer.parseInt(System.getenv("KNOWN_ID"));
    Schema real;
    try (InputStream avsc = HostilePublisher.class.getResourceAsStream("/schemas/OutreachRequested.avsc")) {
      real = new Schema.Parser().parse(avsc);
    }
    byte[] body = avroBody(real, validRequest(real));

    try (KafkaProducer<String, byte[]> raw = new KafkaProducer<>(rawConfig())) {
      report("unknown-id", raw.send(new ProducerRecord<>(topic, "attack-unknown-id", framed(2_000_000_007, body))).get());
      byte[] half = Arrays.copyOf(body, body.length / 2);
      report("truncated", raw.send(new ProducerRecord<>(topic, "attack-truncated", framed(knownId, half))).get());
    }

    Schema foreign = new Schema.Parser().parse(FOREIGN);
    sendWithSerializer(
        topic, "foreign-record", new GenericRecordBuilder(foreign).set("requestId", "x").build(), null);
    Schema impostor = new Schema.Parser().parse(IMPOSTOR);
    GenericRecord impostorRecord = new GenericRecordBuilder(impostor).set("requestId", "x").set("email", 7).build();
    sendWithSerializer(topic, "impostor-at-subject", impostorRecord, null);
    sendWithSerializer(topic, "impostor", impostorRecord, topic + "-impostor");
  }

  /** Auto-registers the record's schema (under TopicRecordNameStrategy, or `artifactId`) and sends it. */
  private static void sendWithSerializer(String topic, String name, GenericRecord record, String artifactId) {
    Properties props = baseConfig();
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, AvroKafkaSerializer.class.getName());
    props.put(SerdeConfig.REGISTRY_URL, System.getenv("REGISTRY_URL"));
    props.put(SerdeConfig.ENABLE_CONFLUENT_ID_HANDLER, true);
    props.put(SerdeConfig.ENABLE_HEADERS, false);
    props.put(SerdeConfig.USE_ID, "contentId");
    props.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, true);
    props.put(SchemaResolverConfig.DEREFERENCE_SCHEMA, true);
    props.put(SerdeConfig.ARTIFACT_RESOLVER_STRATEGY, TopicRecordNameStrategy.class.getName());
    if (artifactId != null) {
      props.put(SerdeConfig.EXPLICIT_ARTIFACT_GROUP_ID, TopicRecordNameStrategy.CCOMPAT_GROUP);
      props.put(SerdeConfig.EXPLICIT_ARTIFACT_ID, artifactId);
    }
    try (KafkaProducer<String, GenericRecord> producer = new KafkaProducer<>(props)) {
      report(name, producer.send(new ProducerRecord<>(topic, "attack-" + name, record)).get());
    } catch (Exception refused) {
      String reason = String.valueOf(refused.getMessage()).replace('\n', ' ');
      System.out.println("refused " + name + " " + refused.getClass().getSimpleName() + ": " + reason);
    }
  }

  private static GenericRecord validRequest(Schema schema) {
    Schema contents = schema.getField("contents").schema();
    GenericRecord content =
        new GenericRecordBuilder(contents.getElementType()).set("subject", "Hi").set("body", "Hello").build();
    return new GenericRecordBuilder(schema)
        .set("eventId", UUID.randomUUID().toString())
        .set("occurredAt", System.currentTimeMillis())
        .set("producer", "hostile-publisher")
        .set("correlationId", UUID.randomUUID().toString())
        .set("requestId", "attack")
        .set("campaignId", "attack")
        .set("candidateId", "attacker")
        .set("email", "attacker@example.com")
        .set("step", "intro")
        .set("contents", new GenericData.Array<>(contents, List.of(content)))
        .build();
  }

  private static byte[] avroBody(Schema schema, GenericRecord record) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
    new GenericDatumWriter<GenericRecord>(schema).write(record, encoder);
    encoder.flush();
    return out.toByteArray();
  }

  /** The Confluent wire format: magic byte 0, the 4-byte big-endian id, the body. */
  private static byte[] framed(int id, byte[] body) {
    return ByteBuffer.allocate(5 + body.length).put((byte) 0).putInt(id).put(body).array();
  }

  private static Properties baseConfig() {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv("KAFKA_BROKERS"));
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    return props;
  }

  private static Properties rawConfig() {
    Properties props = baseConfig();
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return props;
  }

  private static void report(String name, RecordMetadata metadata) {
    System.out.println("sent " + name + " " + metadata.partition() + ":" + metadata.offset());
  }

  private HostilePublisher() {}
}
