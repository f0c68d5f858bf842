// Decodes Avro single-object encoded messages with Apache Avro for Java, the way another team would:
// the .avsc files, one BinaryMessageDecoder per event type, no registry, none of our code.
//   java -cp '<avro libs>/*' DecodeEvents.java <schemas dir> <file of hex-encoded messages, one per line>
// Prints one line per message: <record full name> <record as JSON>.
import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.MissingSchemaException;

public class DecodeEvents {
  public static void main(String[] args) throws Exception {
    List<BinaryMessageDecoder<GenericRecord>> decoders = new ArrayList<>();
    File[] files = new File(args[0]).listFiles((dir, name) -> name.endsWith(".avsc"));
    for (File file : files) {
      Schema schema = new Schema.Parser().parse(file);
      decoders.add(new BinaryMessageDecoder<>(GenericData.get(), schema));
    }
    for (String line : Files.readAllLines(new File(args[1]).toPath())) {
      if (line.isBlank()) continue;
      byte[] bytes = HexFormat.of().parseHex(line.trim());
      GenericRecord record = null;
      for (BinaryMessageDecoder<GenericRecord> decoder : decoders) {
        try {
          record = decoder.decode(bytes);
          break;
        } catch (MissingSchemaException unknownFingerprint) {
          // not this event type: try the next decoder
        }
      }
      if (record == null) throw new IllegalStateException("no schema matched " + line.substring(0, 20));
      System.out.println(record.getSchema().getFullName() + " " + record);
    }
  }
}
