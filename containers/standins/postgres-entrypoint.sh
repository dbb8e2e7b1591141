#!/bin/sh
# The stand-in PostgreSQL's start: a new data folder is made for POSTGRES_USER (its password
# required over TCP) and POSTGRES_DB; then the server runs as the postgres user.
set -eu
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" >/tmp/password
    chown postgres /tmp/password
    runuser -u postgres -- initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --pwfile=/tmp/password \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
    rm /tmp/password
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    runuser -u postgres -- pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
    database=${POSTGRES_DB:-${POSTGRES_USER:-postgres}}
    # initdb made "postgres" already (the official image creates only another).
    [ "$database" = postgres ] || runuser -u postgres -- createdb -U "${POSTGRES_USER:-postgres}" "$database"
    runuser -u postgres -- pg_ctl -D "$PGDATA" -w stop >/dev/null
fi
exec runuser -u postgres -- postgres -D "$PGDATA"
