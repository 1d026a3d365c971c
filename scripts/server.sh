#!/usr/bin/env bash
# The team's MLflow tracking server: PostgreSQL as the backend store and `mlflow server` for the
# REST API, the UI and the artifacts (proxied: clients upload and download through the server and
# need no access to its disk). Both bind to 127.0.0.1; their data and logs live in $TEXTCLF_STATE.
#
#   scripts/server.sh start    # idempotent: starts what is not running (make server)
#   scripts/server.sh stop     # stops both (make server-stop)
#   scripts/server.sh status   # exit 0 when both run, 3 otherwise (make server-status)
#
# Environment (README, Team setup):
#   TEXTCLF_STATE          state folder (default <repo>/.state, git-ignored)
#   TEXTCLF_MLFLOW_PORT    mlflow server port (default 5000)
#   TEXTCLF_PG_PORT        PostgreSQL port (default 5433: Debian's own cluster takes 5432)
#   TEXTCLF_PG_PASSWORD    password of the `mlflow` database role (default: random, made on the
#                          first start and kept in $TEXTCLF_STATE/postgres.password, mode 600)
#   TEXTCLF_MLFLOW_WORKERS uvicorn workers (default 2)
#   TEXTCLF_PG_BIN         folder holding initdb and pg_ctl (default: the newest
#                          /usr/lib/postgresql/*/bin, else the ones on PATH)
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  MLflow's GenAI job runner (scorers, prompt optimisation;
#                          the pipeline uses none): 8 more processes, about 2 GB; default false here
#   TEXTCLF_PYTHON         the Python with mlflow and psycopg (default <repo>/.venv/bin/python)
#   TEXTCLF_ARTIFACTS      where the server keeps artifacts: a folder (default $TEXTCLF_STATE/mlartifacts)
#                          or s3://bucket/prefix, with the standard AWS variables (AWS_ACCESS_KEY_ID,
#                          AWS_SECRET_ACCESS_KEY, and MLFLOW_S3_ENDPOINT_URL for MinIO or another
#                          S3-compatible store) set in this script's environment
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=$(realpath -m "${TEXTCLF_STATE:-$ROOT/.state}")
MLFLOW_PORT=${TEXTCLF_MLFLOW_PORT:-5000}
PG_PORT=${TEXTCLF_PG_PORT:-5433}
WORKERS=${TEXTCLF_MLFLOW_WORKERS:-2}
PYTHON=${TEXTCLF_PYTHON:-$ROOT/.venv/bin/python}
PGDATA=$STATE/postgres
PASSFILE=$STATE/postgres.password
PIDFILE=$STATE/mlflow.pid
ARTIFACTS=${TEXTCLF_ARTIFACTS:-$STATE/mlartifacts}
URL=http://127.0.0.1:$MLFLOW_PORT

die() { echo "server.sh: $*" >&2; exit 1; }

pg_bin() {
  local dir=${TEXTCLF_PG_BIN:-}
  if [ -z "$dir" ]; then
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$dir" ] || dir=$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/pg_ctl)")
  fi
  [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/psql" ] \
    || die "PostgreSQL is not installed (no initdb, pg_ctl and psql in ${dir}): apt-get install postgresql, or set TEXTCLF_PG_BIN to the folder that holds them"
  echo "$dir"
}

# PostgreSQL refuses to run as root, so root runs it as the `postgres` user the package creates.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

healthy() {  # bash's /dev/tcp: no curl on a fresh machine, and no Python start-up per poll
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$MLFLOW_PORT" &&
            printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && head -c 12 <&3) 2>/dev/null) || return 1
  [[ $reply == "HTTP/1."?" 200" ]]
}

pg_running() { [ -f "$PGDATA/PG_VERSION" ] && as_pg "$PG/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }

alive() {  # $1 is a running process (a zombie, dead but not yet reaped, is not)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

mlflow_pid() {  # the pid in the pid file, if that process is still our mlflow server
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "mlflow server" \
    && echo "$pid"
}

password() {
  if [ -n "${TEXTCLF_PG_PASSWORD:-}" ]; then echo "$TEXTCLF_PG_PASSWORD"; return; fi
  if [ ! -s "$PASSFILE" ]; then
    (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$PASSFILE")
  fi
  cat "$PASSFILE"
}

init_postgres() {
  mkdir -p "$PGDATA"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$PGDATA"; fi
  chmod 700 "$PGDATA"
  as_pg test -w "$PGDATA" \
    || die "the postgres user cannot write $PGDATA (a parent folder is closed to others): set TEXTCLF_STATE to a folder it can reach"
  [ -f "$PGDATA/PG_VERSION" ] && return
  # peer: local admin through the socket, as the OS user; scram: the mlflow role over TCP.
  as_pg "$PG/initdb" -D "$PGDATA" -U "$(as_pg id -un)" -E UTF8 --locale=C \
    --auth-local=peer --auth-host=scram-sha-256 > "$STATE/postgres-init.log" 2>&1 \
    || die "initdb failed: see $STATE/postgres-init.log"
}

start_postgres() {
  if pg_running; then
    local port
    port=$(sed -n 4p "$PGDATA/postmaster.pid")
    [ "$port" = "$PG_PORT" ] || die "PostgreSQL already runs on port $port, not TEXTCLF_PG_PORT=$PG_PORT: run 'scripts/server.sh stop' first to change the port"
    echo "PostgreSQL already running on 127.0.0.1:$PG_PORT"
  else
    touch "$STATE/postgres.log"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$STATE/postgres.log"; fi
    # Port, address and socket folder on the command line, so TEXTCLF_PG_PORT may change between starts.
    as_pg "$PG/pg_ctl" -D "$PGDATA" -l "$STATE/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PGDATA" start > /dev/null \
      || die "PostgreSQL did not start: see $STATE/postgres.log"
    echo "PostgreSQL started on 127.0.0.1:$PG_PORT (data $PGDATA)"
  fi
  local pw=${1//\'/\'\'}  # SQL string literal; sent on stdin, so it never shows in `ps`
  as_pg "$PG/psql" -X -q -v ON_ERROR_STOP=1 -h "$PGDATA" -p "$PG_PORT" -U "$(as_pg id -un)" -d postgres > /dev/null <<SQL \
    || die "could not create the mlflow role and database: see $STATE/postgres.log"
SELECT 'CREATE ROLE mlflow LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mlflow')\gexec
ALTER ROLE mlflow PASSWORD '$pw';
SELECT 'CREATE DATABASE mlflow OWNER mlflow' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'mlflow')\gexec
SQL
}

start_mlflow() {
  if mlflow_pid > /dev/null; then
    healthy || die "mlflow server (pid $(mlflow_pid)) runs but $URL/health does not answer: see $STATE/mlflow.log, or stop and start again"
    echo "mlflow server already running at $URL"
    return
  fi
  local log_size  # the log is appended to: its tail after a failed start is this start's
  log_size=$(stat -c %s "$STATE/mlflow.log" 2>/dev/null || echo 0)
  # The password travels in the environment (libpq reads PGPASSWORD), not in the URI, which `ps` shows.
  # setsid: the server and its workers form one process group, which stop ends as a whole.
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false} \
  PGPASSWORD=$1 PATH="$(dirname "$PYTHON"):$PATH" setsid "$PYTHON" -m mlflow server \
    --backend-store-uri "postgresql://mlflow@127.0.0.1:$PG_PORT/mlflow" \
    --artifacts-destination "$ARTIFACTS" \
    --host 127.0.0.1 --port "$MLFLOW_PORT" --workers "$WORKERS" \
    >> "$STATE/mlflow.log" 2>&1 < /dev/null &
  local pid=$! waited=0
  echo "$pid" > "$PIDFILE"
  until healthy; do
    # alive, not "is our mlflow server": while setsid execs Python, /proc/PID/cmdline can be
    # empty for a moment, which a loaded machine turned into a false "exited at start"
    alive "$pid" || die "mlflow server exited at start: see $STATE/mlflow.log, which ends: $(tail -c "+$((log_size + 1))" "$STATE/mlflow.log" | tail -n 5 | tr '\n' ' ')"
    [ "$waited" -lt 240 ] || die "mlflow server silent on $URL/health for 120 s: see $STATE/mlflow.log"
    sleep 0.5; waited=$((waited + 1))
  done
  echo "mlflow server running at $URL (UI and API; log $STATE/mlflow.log)"
}

start() {
  [ -x "$PYTHON" ] || die "$PYTHON not found: run 'make install' (or set TEXTCLF_PYTHON)"
  "$PYTHON" -c "import mlflow, psycopg" 2>/dev/null \
    || die "$PYTHON lacks mlflow or psycopg: run 'make install'"
  if [ "$(id -u)" = 0 ] && ! id postgres > /dev/null 2>&1; then
    die "PostgreSQL refuses to run as root and there is no 'postgres' user: apt-get install postgresql creates it"
  fi
  # Ports first, so a clash is reported before anything is created.
  if ! pg_running && listening "$PG_PORT"; then
    die "port $PG_PORT is in use by another program: set TEXTCLF_PG_PORT to a free port"
  fi
  if ! mlflow_pid > /dev/null && listening "$MLFLOW_PORT"; then
    die "port $MLFLOW_PORT is in use by another program: set TEXTCLF_MLFLOW_PORT to a free port"
  fi
  mkdir -p "$STATE"
  local pw
  pw=$(password)
  init_postgres
  start_postgres "$pw"
  start_mlflow "$pw"
  echo "export MLFLOW_TRACKING_URI=$URL"
}

stop() {
  local pid
  if pid=$(mlflow_pid); then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "mlflow server stopped"
  else
    echo "mlflow server was not running"
  fi
  rm -f "$PIDFILE"
  if pg_running; then
    as_pg "$PG/pg_ctl" -D "$PGDATA" -m fast -w stop > /dev/null || die "PostgreSQL did not stop: see $STATE/postgres.log"
    echo "PostgreSQL stopped"
  else
    echo "PostgreSQL was not running"
  fi
}

status() {
  local up=0
  if pg_running; then echo "PostgreSQL: running on 127.0.0.1:$(sed -n 4p "$PGDATA/postmaster.pid") (data $PGDATA)"
  else echo "PostgreSQL: stopped"; up=3; fi
  if mlflow_pid > /dev/null && healthy; then echo "mlflow server: running at $URL"
  else echo "mlflow server: stopped"; up=3; fi
  return $up
}

case "${1:-}" in
  start) PG=$(pg_bin); start ;;
  stop) PG=$(pg_bin); stop ;;
  status) PG=$(pg_bin); status ;;
  *) die "usage: scripts/server.sh start|stop|status" ;;
esac
