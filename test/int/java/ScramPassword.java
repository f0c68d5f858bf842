import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;

/**
 * The broker side of a SCRAM password rotation, as an operator does it with {@code kafka-configs.sh
 * --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users --entity-name <user>}
 * (docs/operations.md, "Rotating Kafka credentials: which side first"), through Kafka's own Admin
 * client: kafkajs has no AlterUserScramCredentials. The SCRAM-SHA-512 credential changes, the one the
 * services log in with (a request may change one per user). services/sender/test/credential-rotation.int.test.ts runs it with
 * {@code java -cp <Kafka's jars> ScramPassword.java <bootstrap> <CA file> <user>}, the super user's
 * password in ADMIN_PASSWORD and the new one in NEW_PASSWORD (environment, not arguments: ps shows
 * those).
 */
public class ScramPassword {
  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: ScramPassword <bootstrap> <CA file> <user>");
      System.exit(64);
    }
    String adminPassword = System.getenv("ADMIN_PASSWORD");
    String newPassword = System.getenv("NEW_PASSWORD");
    Properties config = new Properties();
    config.put("bootstrap.servers", args[0]);
    config.put("security.protocol", "SASL_SSL");
    config.put("sasl.mechanism", "SCRAM-SHA-512");
    config.put(
        "sasl.jaas.config",
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\""
            + adminPassword
            + "\";");
    config.put("ssl.truststore.type", "PEM");
    config.put("ssl.truststore.location", args[1]);
    String user = args[2];
    try (Admin admin = Admin.create(config)) {
      admin
          .alterUserScramCredentials(
              List.of(
                  new UserScramCredentialUpsertion(
                      user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), newPassword)))
          .all()
          .get();
    }
    System.out.println("changed the SCRAM password of " + user);
  }
}
