#!/bin/bash
# The postgres image's contract: POSTGRES_PASSWORD for the superuser POSTGRES_USER (postgres), the
# database POSTGRES_DB (its name) created on the first start, password logins over TCP, port 5432.
set -euo pipefail
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
bin=/usr/lib/postgresql/15/bin
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password="$(mktemp)"
  printf '%s' "${POSTGRES_PASSWORD:?the postgres image needs POSTGRES_PASSWORD}" >"$password"
  chown postgres "$password"
  as_postgres "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$password" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$password"
  echo 'host all all all scram-sha-256' >>"$PGDATA/pg_hba.conf"
  as_postgres "$bin/pg_ctl" -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  if [ "$db" != postgres ]; then as_postgres "$bin/psql" -q -U "$user" -d postgres -c "CREATE DATABASE \"$db\""; fi
  as_postgres "$bin/pg_ctl" -D "$PGDATA" -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
