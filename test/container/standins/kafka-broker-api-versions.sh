#!/bin/sh
# The compose healthcheck's command, as in the apache/kafka image (BrokerApiVersions.java).
exec java -Xmx64m -XX:TieredStopAtLevel=1 -cp '/opt/kafka/libs/*:/opt/kafka/tools' BrokerApiVersions "$@"
