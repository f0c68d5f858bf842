package dev.outreach.examples.publisher;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.apicurio.registry.resolver.SchemaResolverConfig;
import io.apicurio.registry.serde.SerdeConfig;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.text.Normalizer;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Reads outreach requests, one JSON object per line on standard input (the body of the planner's
 * {@code POST /v1/outreach-requests}: requestId, campaignId, candidateId, email, step, contents, and
 * optionally experimentId, sendAt, conversationId, followUps, correlationId), and produces each as an
 * {@code OutreachRequested} to {@code outreach.requested.v1}.
 *
 * <p>The value is Avro in the Confluent wire format: a zero byte, the schema's 4-byte registry id, the
 * Avro body. Apicurio's serializer looks the id up once (by the schema's content, under the subject
 * {@code <topic>-outreach.events.OutreachRequested}) and caches it; it never registers a schema.
 *
 * <p>Prints {@code acked <requestId> <partition>:<offset>} per request the broker acknowledged, and
 * {@code failed <requestId> <reason>} per request it did not; exits 1 if any failed.
 *
 * <p>Environment: KAFKA_BROKERS (127.0.0.1:9092), REGISTRY_URL (Apicurio's v2 API,
 * http://127.0.0.1:8085/apis/registry/v2), TOPIC (outreach.requested.v1), PRODUCER_NAME
 * (java-publisher), REGISTRY_USER and REGISTRY_PASSWORD (basic auth, when the registry asks).
 */
public final class Publisher {
  private static final ObjectMapper JSON = new ObjectMapper();

  private Publisher() {}

  public static void main(String[] args) throws IOException, InterruptedException {
    String topic = env("TOPIC", "outreach.requested.v1");
    Schema schema = loadSchema();
    AtomicInteger failures = new AtomicInteger();
    try (KafkaProducer<String, GenericRecord> producer = new KafkaProducer<>(config())) {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      String line;
      while ((line = in.readLine()) != null) {
        if (line.isBlank()) continue;
        JsonNode request = JSON.readTree(line);
        String requestId = request.path("requestId").asText("(none)");
        GenericRecord event;
        try {
          event = outreachRequested(schema, request);
        } catch (RuntimeException invalid) {
          System.out.println("failed " + requestId + " " + invalid.getMessage());
          failures.incrementAndGet();
          continue;
        }
        ProducerRecord<String, GenericRecord> record =
            new ProducerRecord<>(topic, candidateKey(request.path("candidateId").asText()), event);
        // The headers every platform producer sets (docs/api/asyncapi.yaml); the body is what counts.
        record.headers().add("event-id", utf8(event.get("eventId")));
        record.headers().add("event-type", utf8("OutreachRequested"));
        record.headers().add("correlation-id", utf8(event.get("correlationId")));
        producer.send(
            record,
            (metadata, error) -> {
              if (error != null) {
                failures.incrementAndGet();
                System.out.println("failed " + requestId + " " + error.getMessage());
              } else {
                System.out.println("acked " + requestId + " " + metadata.partition() + ":" + metadata.offset());
              }
            });
      }
      producer.flush();
    } catch (org.apache.kafka.common.errors.SerializationException refused) {
      // The registry does not hold this schema under the subject (or is unreachable): nothing was sent.
      System.out.println("failed (serializer) " + refused.getMessage());
      System.exit(1);
    }
    System.exit(failures.get() == 0 ? 0 : 1);
  }

  static Properties config() {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, env("KAFKA_BROKERS", "127.0.0.1:9092"));
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    props.put(ProducerConfig.CLIENT_ID_CONFIG, env("PRODUCER_NAME", "java-publisher"));
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, AvroKafkaSerializer.class.getName());
    props.put(SerdeConfig.REGISTRY_URL, env("REGISTRY_URL", "http://127.0.0.1:8085/apis/registry/v2"));
    // Confluent wire format: magic byte 0 and a 4-byte id in the value, no id headers.
    props.put(SerdeConfig.ENABLE_CONFLUENT_ID_HANDLER, true);
    props.put(SerdeConfig.ENABLE_HEADERS, false);
    // Apicurio 3's Confluent-compatible API hands out content ids: write the same kind of id.
    props.put(SerdeConfig.USE_ID, "contentId");
    // The platform registers its schemas; a publisher only looks its schema up (by content).
    props.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, false);
    // The subject <topic>-<record full name>, and the whole schema looked up as registered (not one
    // split into references to Content and FollowUp).
    props.put(SerdeConfig.ARTIFACT_RESOLVER_STRATEGY, TopicRecordNameStrategy.class.getName());
    props.put(SchemaResolverConfig.DEREFERENCE_SCHEMA, true);
    String user = System.getenv("REGISTRY_USER");
    if (user != null && !user.isEmpty()) {
      props.put(SerdeConfig.AUTH_USERNAME, user);
      props.put(SerdeConfig.AUTH_PASSWORD, env("REGISTRY_PASSWORD", ""));
    }
    return props;
  }

  /** The platform's OutreachRequested.avsc, packaged from schemas/ by the build. */
  static Schema loadSchema() throws IOException {
    try (InputStream avsc = Publisher.class.getResourceAsStream("/schemas/OutreachRequested.avsc")) {
      if (avsc == null) throw new IOException("schemas/OutreachRequested.avsc is not on the classpath");
      return new Schema.Parser().parse(avsc);
    }
  }

  /** The request as an OutreachRequested: the envelope filled in, the rest as given. */
  static GenericRecord outreachRequested(Schema schema, JsonNode request) {
    String correlationId = optionalText(request, "correlationId");
    GenericRecordBuilder event =
        new GenericRecordBuilder(schema)
            .set("eventId", UUID.randomUUID().toString())
            .set("occurredAt", System.currentTimeMillis())
            .set("producer", env("PRODUCER_NAME", "java-publisher"))
            .set("correlationId", correlationId != null ? correlationId : UUID.randomUUID().toString())
            .set("causationId", null)
            .set("requestId", requiredText(request, "requestId"))
            .set("campaignId", requiredText(request, "campaignId"))
            .set("candidateId", requiredText(request, "candidateId"))
            .set("email", requiredText(request, "email"))
            .set("step", request.hasNonNull("step") ? request.get("step").asText() : "intro")
            .set("experimentId", optionalText(request, "experimentId"))
            .set("contents", contents(schema.getField("contents").schema(), request.path("contents")))
            .set("sendAt", sendAt(request))
            .set("conversationId", optionalText(request, "conversationId"));
    if (request.has("followUps")) {
      Schema followUps = schema.getField("followUps").schema();
      Schema followUp = followUps.getElementType();
      List<GenericRecord> list = new ArrayList<>();
      for (JsonNode item : request.get("followUps")) {
        list.add(
            new GenericRecordBuilder(followUp)
                .set("step", requiredText(item, "step"))
                .set("delayMs", item.path("delayMs").asLong())
                .set("contents", contents(followUp.getField("contents").schema(), item.path("contents")))
                .build());
      }
      event.set("followUps", new GenericData.Array<>(followUps, list));
    }
    GenericRecord record = event.build();
    if (!GenericData.get().validate(schema, record)) {
      throw new IllegalArgumentException("does not match OutreachRequested.avsc");
    }
    return record;
  }

  private static GenericData.Array<GenericRecord> contents(Schema arraySchema, JsonNode items) {
    if (!items.isArray() || items.isEmpty()) throw new IllegalArgumentException("contents must hold one or more items");
    Schema content = arraySchema.getElementType();
    List<GenericRecord> list = new ArrayList<>();
    for (JsonNode item : items) {
      list.add(
          new GenericRecordBuilder(content)
              .set("variant", optionalText(item, "variant"))
              .set("subject", requiredText(item, "subject"))
              .set("body", requiredText(item, "body"))
              .build());
    }
    return new GenericData.Array<>(arraySchema, list);
  }

  /** sendAt as the HTTP API takes it (an ISO date-time) or as epoch milliseconds. */
  private static Long sendAt(JsonNode request) {
    JsonNode sendAt = request.get("sendAt");
    if (sendAt == null || sendAt.isNull()) return null;
    return sendAt.isNumber() ? sendAt.asLong() : Instant.parse(sendAt.asText()).toEpochMilli();
  }

  /**
   * The message key: the candidate id in NFKC, trimmed, so one candidate's requests stay in order on
   * one partition. The platform canonicalizes the id itself (schemas/README.md, "Keys").
   */
  static String candidateKey(String candidateId) {
    return Normalizer.normalize(candidateId, Normalizer.Form.NFKC).strip();
  }

  private static String requiredText(JsonNode node, String field) {
    JsonNode value = node.get(field);
    if (value == null || !value.isTextual()) throw new IllegalArgumentException(field + " must be a string");
    return value.asText();
  }

  private static String optionalText(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? null : value.asText();
  }

  private static byte[] utf8(Object value) {
    return String.valueOf(value).getBytes(StandardCharsets.UTF_8);
  }

  private static String env(String name, String fallback) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? fallback : value;
  }
}
