#!/bin/bash
# The apache/kafka image's contract: every KAFKA_<NAME> variable is a broker property (upper case to
# lower, `_` to `.`, `__` to `_`, `___` to `-`); CLUSTER_ID names the cluster; the storage is formatted
# on the first start.
set -euo pipefail
config=/opt/kafka/config/server.properties
mkdir -p /opt/kafka/config /var/lib/kafka/data
: >"$config"
while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS | KAFKA_OPTS) continue ;;
    KAFKA_*) ;;
    *) continue ;;
  esac
  key="${name#KAFKA_}"
  key="${key,,}"
  key="${key//___/-}"
  key="${key//__/@}"
  key="${key//_/.}"
  key="${key//@/_}"
  printf '%s=%s\n' "$key" "$value" >>"$config"
done < <(env)
grep -q '^log.dirs=' "$config" || echo 'log.dirs=/var/lib/kafka/data' >>"$config"
classpath='/opt/kafka/libs/*'
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  java -cp "$classpath" kafka.tools.StorageTool format -t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$config" >/dev/null
fi
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -cp "$classpath" kafka.Kafka "$config"
