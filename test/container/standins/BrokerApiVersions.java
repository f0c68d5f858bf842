// What the compose file's Kafka healthcheck runs (kafka-broker-api-versions.sh --bootstrap-server H:P):
// exit 0 once the broker answers the Kafka protocol with its cluster's nodes. The apache/kafka image's
// script lives in kafka-tools, which the local broker's jars do not include.
import java.util.Arrays;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;

public class BrokerApiVersions {
  public static void main(String[] args) throws Exception {
    int at = Arrays.asList(args).indexOf("--bootstrap-server");
    if (at < 0 || at + 1 >= args.length) {
      System.err.println("usage: kafka-broker-api-versions.sh --bootstrap-server HOST:PORT");
      System.exit(64);
    }
    Properties properties = new Properties();
    properties.put("bootstrap.servers", args[at + 1]);
    properties.put("request.timeout.ms", "5000");
    properties.put("default.api.timeout.ms", "8000");
    try (Admin admin = Admin.create(properties)) {
      System.out.println(admin.describeCluster().nodes().get());
    }
  }
}
