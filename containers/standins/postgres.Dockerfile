# PostgreSQL where the postgres image cannot be pulled: Debian's PostgreSQL 15, made ready as the
# official image is (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB; data in /var/lib/postgresql/data).
ARG BASE=tokmaint-base:bookworm
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint.sh"]
