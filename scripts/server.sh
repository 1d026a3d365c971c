#!/usr/bin/env bash
# The team's MLflow tracking server: PostgreSQL as the backend store and `mlflow server` for the
# REST API, the UI and the artifacts (proxied: clients upload and download through the server and
# need no access to its disk). PostgreSQL binds to 127.0.0.1, mlflow server to TEXTCLF_MLFLOW_HOST;
# their data and logs live in $TEXTCLF_STATE.
#
#   scripts/server.sh start    # idempotent: starts what is not running (make server)
#   scripts/server.sh stop     # stops both (make server-stop)
#   scripts/server.sh status   # exit 0 when both run, 3 otherwise (make server-status)
#   scripts/server.sh add-user NAME READ|EDIT [--experiment E] [--model M]...
#                              # TEXTCLF_AUTH=basic: an account with that permission on the
#                              # experiment (textclf) and registered model(s) (textclf)
#
# Environment (README, Team setup):
#   TEXTCLF_STATE          state folder (default <repo>/.state, git-ignored)
#   TEXTCLF_MLFLOW_HOST    address mlflow server binds to (default 127.0.0.1); anything but a
#                          loopback address needs TEXTCLF_AUTH=basic
#   TEXTCLF_AUTH           none (default) or basic: MLflow's basic-auth app, users in the database
#                          mlflow_auth on the same PostgreSQL, admin password made on the first
#                          start and kept in $TEXTCLF_STATE/admin.password (mode 600); each start
#                          with it closes $TEXTCLF_STATE and the artifact folder to other users
#   TEXTCLF_ALLOWED_HOSTS  more names clients may use for the server (comma-separated, e.g. its DNS
#                          name); the bound address and the loopback forms are always allowed
#   TEXTCLF_MLFLOW_PORT    mlflow server port (default 5000)
#   TEXTCLF_PG_PORT        PostgreSQL port (default 5433: Debian's own cluster takes 5432)
#   TEXTCLF_PG_PASSWORD    password of the `mlflow` database role (default: random, made on the
#                          first start and kept in $TEXTCLF_STATE/postgres.password, mode 600);
#                          a start that finds mlflow server running changes no password: it refuses another one
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

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$(realpath -m "${TEXTCLF_STATE:-$ROOT/.state}")
MLFLOW_PORT=${TEXTCLF_MLFLOW_PORT:-5000}
PG_PORT=${TEXTCLF_PG_PORT:-5433}
WORKERS=${TEXTCLF_MLFLOW_WORKERS:-2}
PYTHON=${TEXTCLF_PYTHON:-$ROOT/.venv/bin/python}
PGDATA=$STATE/postgres
PASSFILE=$STATE/postgres.password
PIDFILE=$STATE/mlflow.pid
ARTIFACTS=${TEXTCLF_ARTIFACTS:-$STATE/mlartifacts}
HOST=${TEXTCLF_MLFLOW_HOST:-127.0.0.1}
AUTH=${TEXTCLF_AUTH:-none}
ADMIN=admin
ADMIN_PASSFILE=$STATE/admin.password
SECRETFILE=$STATE/flask.secret
AUTH_INI=$STATE/basic_auth.ini
BINDFILE=$STATE/mlflow.bind  # "HOST AUTH" of the running server, for add-user and a changed start

die() { echo "server.sh: $*" >&2; exit 1; }

# An s3:// destination is checked at start, with the credentials and endpoint the server will use:
# a wrong one would otherwise surface only when a run logs its first artifact, after its training.
check_artifacts() {
  [[ $ARTIFACTS == s3://* ]] || return 0
  local err
  err=$(TEXTCLF_ARTIFACTS=$ARTIFACTS "$PYTHON" - 2>&1 <<'PY'
import os, sys, urllib.parse
import boto3
from botocore.config import Config
bucket = urllib.parse.urlparse(os.environ["TEXTCLF_ARTIFACTS"]).netloc
client = boto3.client("s3", endpoint_url=os.environ.get("MLFLOW_S3_ENDPOINT_URL") or None,
                      config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1}))
try:
    client.head_bucket(Bucket=bucket)
except Exception as err:
    sys.exit(f"{type(err).__name__}: {err}")
PY
  ) || die "artifact store $ARTIFACTS cannot be reached ($(tail -n 1 <<< "$err")): check MLFLOW_S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and that the bucket exists"
}

url_host() { case $1 in *:*) echo "[$1]" ;; *) echo "$1" ;; esac; }  # an IPv6 literal in a URL
loopback() { case $1 in 127.*|localhost|::1) return 0 ;; *) return 1 ;; esac; }
probe_host() { case $1 in 0.0.0.0) echo 127.0.0.1 ;; ::) echo ::1 ;; *) echo "$1" ;; esac; }
RUNNING=$(cat "$BINDFILE" 2>/dev/null || true)  # status, stop and add-user reach the server where it runs
PROBE=$(probe_host "${RUNNING%% *}")
[ -n "$RUNNING" ] || PROBE=$(probe_host "$HOST")
URL=http://$(url_host "$PROBE"):$MLFLOW_PORT

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

listening() { (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null; }

healthy() {  # bash's /dev/tcp: no curl on a fresh machine, and no Python start-up per poll
  local reply
  reply=$( (exec 3<>"/dev/tcp/$PROBE/$MLFLOW_PORT" &&
            printf 'GET /health HTTP/1.0\r\nHost: %s\r\n\r\n' "$(url_host "$PROBE")" >&3 && head -c 12 <&3) 2>/dev/null) || return 1
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

secret_file() {  # $1 holds a random secret, made (mode 600) on first use
  if [ ! -s "$1" ]; then
    (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$1")
  fi
  chmod 600 "$1"
  cat "$1"
}

password() {
  if [ -n "${TEXTCLF_PG_PASSWORD:-}" ]; then echo "$TEXTCLF_PG_PASSWORD"; return; fi
  secret_file "$PASSFILE"
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
  # SQL string literal; sent on stdin, so it never shows in `ps`. A running mlflow server keeps the
  # password it started with: changing it under the server would fail its next new connection.
  local alter="ALTER ROLE mlflow PASSWORD '${1//\'/\'\'}';"
  if mlflow_pid > /dev/null; then alter=""; fi
  as_pg "$PG/psql" -X -q -v ON_ERROR_STOP=1 -h "$PGDATA" -p "$PG_PORT" -U "$(as_pg id -un)" -d postgres > /dev/null <<SQL \
    || die "could not create the mlflow role and database: see $STATE/postgres.log"
SELECT 'CREATE ROLE mlflow LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mlflow')\gexec
$alter
SELECT 'CREATE DATABASE mlflow OWNER mlflow' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'mlflow')\gexec
SELECT 'CREATE DATABASE mlflow_auth OWNER mlflow' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'mlflow_auth')\gexec
SELECT 'CREATE DATABASE optuna OWNER mlflow' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'optuna')\gexec
SQL
  local given="the one in $PASSFILE"
  [ -z "${TEXTCLF_PG_PASSWORD:-}" ] || given=TEXTCLF_PG_PASSWORD
  if [ -z "$alter" ] && ! PGPASSWORD="$1" "$PG/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U mlflow -d mlflow \
       -c 'SELECT 1' > /dev/null 2>&1; then
    die "mlflow server runs with another database password than $given: run 'scripts/server.sh stop' first to change it"
  fi
}

tighten() {  # basic auth: what an open server wrote before (artifacts, logs) was readable by every local user
  local dest
  dest=$(realpath -m "$ARTIFACTS")
  if [[ $ARTIFACTS != s3://* && $dest/ != "$STATE"/* && -d $dest ]]; then  # in $STATE: tightened with it
    chmod -R go-rwx "$dest" || die "could not close $dest to other users"
  fi
  # PostgreSQL keeps its own folder closed; others keep x on $STATE: root's postgres user must reach it
  find "$STATE" -mindepth 1 -maxdepth 1 ! -path "$PGDATA" -exec chmod -R go-rwx {} + \
    || die "could not close $STATE to other users"
  chmod go-rw "$STATE"
}

write_auth_ini() {  # MLflow's basic-auth config; its database password comes from PGPASSWORD, not this file
  (umask 077; cat > "$AUTH_INI" <<INI
[mlflow]
# NO_PERMISSIONS: an account reads and writes only what add-user granted it (README, Team setup)
default_permission = NO_PERMISSIONS
database_uri = postgresql://mlflow@127.0.0.1:$PG_PORT/mlflow_auth
admin_username = $ADMIN
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
  )
  chmod 600 "$AUTH_INI"
}

allowed_hosts() {  # what a client may send as Host: the bound address, the loopback forms, TEXTCLF_ALLOWED_HOSTS
  local names=(127.0.0.1 localhost "[::1]") extra=() name out=""
  case $HOST in
    0.0.0.0|::) for name in $(hostname) $(hostname -f 2>/dev/null) $(hostname -I 2>/dev/null); do
                  names+=("$(url_host "$name")"); done ;;
    *) names+=("$(url_host "$HOST")") ;;
  esac
  IFS=, read -ra extra <<< "${TEXTCLF_ALLOWED_HOSTS:-}"
  for name in "${names[@]}" "${extra[@]}"; do
    [ -n "$name" ] && out+="$name,$name:$MLFLOW_PORT,"
  done
  echo "${out%,}"
}

start_mlflow() {
  if mlflow_pid > /dev/null; then
    healthy || die "mlflow server (pid $(mlflow_pid)) runs but $URL/health does not answer: see $STATE/mlflow.log, or stop and start again"
    echo "mlflow server already running at $URL"
    return
  fi
  local log_size  # the log is appended to: its tail after a failed start is this start's
  log_size=$(stat -c %s "$STATE/mlflow.log" 2>/dev/null || echo 0)
  local auth_args=() auth_env=()
  if [ "$AUTH" = basic ]; then
    write_auth_ini
    # Secrets in the environment, which only this user and root can read, never on the command line.
    # The admin password only bootstraps the admin on the first start; later ones ignore it.
    auth_args=(--app-name basic-auth)
    umask 077  # artifacts the server writes to its disk: permissions mean little if others can read them
    auth_env=("MLFLOW_AUTH_CONFIG_PATH=$AUTH_INI" "MLFLOW_AUTH_ADMIN_PASSWORD=$(secret_file "$ADMIN_PASSFILE")"
              "MLFLOW_FLASK_SERVER_SECRET_KEY=$(secret_file "$SECRETFILE")")
  fi
  # The password travels in the environment (libpq reads PGPASSWORD), not in the URI, which `ps` shows.
  # setsid: the server and its workers form one process group, which stop ends as a whole.
  env "${auth_env[@]}" MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}" \
  PGPASSWORD="$1" PATH="$(dirname "$PYTHON"):$PATH" setsid "$PYTHON" -m mlflow server \
    --backend-store-uri "postgresql://mlflow@127.0.0.1:$PG_PORT/mlflow" \
    --artifacts-destination "$ARTIFACTS" "${auth_args[@]}" --allowed-hosts "$(allowed_hosts)" \
    --host "$HOST" --port "$MLFLOW_PORT" --workers "$WORKERS" \
    >> "$STATE/mlflow.log" 2>&1 < /dev/null &
  local pid=$! waited=0
  echo "$pid" > "$PIDFILE"
  echo "$HOST $AUTH" > "$BINDFILE"
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
  case $AUTH in none|basic) ;; *) die "TEXTCLF_AUTH=$AUTH is not none or basic" ;; esac
  # Anyone who reaches an open server can change runs, models and the champion alias that serving loads.
  if ! loopback "$HOST" && [ "$AUTH" != basic ]; then
    die "TEXTCLF_MLFLOW_HOST=$HOST is reachable beyond this machine, and TEXTCLF_AUTH=$AUTH lets anyone who reaches it change runs and models: set TEXTCLF_AUTH=basic (or bind 127.0.0.1)"
  fi
  if ! mlflow_pid > /dev/null; then  # a new server: this shell's host, not a stale bind file's
    PROBE=$(probe_host "$HOST"); URL=http://$(url_host "$PROBE"):$MLFLOW_PORT
  fi
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
  if ! mlflow_pid > /dev/null && listening "$MLFLOW_PORT" "$PROBE"; then
    die "port $MLFLOW_PORT is in use by another program: set TEXTCLF_MLFLOW_PORT to a free port"
  fi
  local running
  if mlflow_pid > /dev/null && running=$(cat "$BINDFILE" 2>/dev/null) && [ "$running" != "$HOST $AUTH" ]; then
    die "mlflow server runs with host and auth '$running', not '$HOST $AUTH': run 'scripts/server.sh stop' first to change them"
  fi
  check_artifacts
  mkdir -p "$STATE"
  local pw
  pw=$(password)
  init_postgres
  if ! pg_running && mlflow_pid > /dev/null; then
    # PostgreSQL went down under a running server: a worker that found it gone sits in MLflow's
    # back-off (10 tries, about 5 minutes) and answers nothing, so the server starts afresh.
    echo "PostgreSQL was down under the running mlflow server: restarting that too"
    stop_mlflow > /dev/null
  fi
  start_postgres "$pw"
  if [ "$AUTH" = basic ]; then tighten; fi  # after PostgreSQL's logs exist, before mlflow serves
  start_mlflow "$pw"
  echo "export MLFLOW_TRACKING_URI=$URL"
  case $HOST in 0.0.0.0|::) echo "teammates: export MLFLOW_TRACKING_URI=http://$(hostname -f):$MLFLOW_PORT" ;; esac
  if [ "$AUTH" = basic ]; then
    echo "basic auth: admin user '$ADMIN', password in $ADMIN_PASSFILE; add users with 'scripts/server.sh add-user NAME READ|EDIT'"
  fi
}

add_user() {
  mlflow_pid > /dev/null && [ "${RUNNING#* }" = basic ] \
    || die "add-user needs the server running with TEXTCLF_AUTH=basic: TEXTCLF_AUTH=basic scripts/server.sh start"
  [ -s "$ADMIN_PASSFILE" ] || die "$ADMIN_PASSFILE is missing: the admin password cannot be read"
  MLFLOW_TRACKING_URI=$URL \
  MLFLOW_TRACKING_USERNAME=$ADMIN MLFLOW_TRACKING_PASSWORD=$(cat "$ADMIN_PASSFILE") \
    "$PYTHON" -W "ignore:starlette.middleware.wsgi is deprecated" "$ROOT/scripts/auth_users.py" --passwords "$STATE/users" "$@"
}

stop_mlflow() {
  local pid
  if pid=$(mlflow_pid); then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "mlflow server stopped"
  else
    echo "mlflow server was not running"
  fi
  rm -f "$PIDFILE" "$BINDFILE"
}

stop() {
  stop_mlflow
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
  if mlflow_pid > /dev/null && healthy; then echo "mlflow server: running at $URL (host and auth: $(cat "$BINDFILE" 2>/dev/null))"
  else echo "mlflow server: stopped"; up=3; fi
  return $up
}

# Run, not sourced (a test sources it to call one function). Parsed whole before it runs, and exit:
# bash reads a script as it goes, so an edit to this file during a start would otherwise run from
# the wrong offset once start returns.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
case "${1:-}" in
  start) PG=$(pg_bin); start ;;
  stop) PG=$(pg_bin); stop ;;
  status) PG=$(pg_bin); status ;;
  add-user) shift; add_user "$@" ;;
  *) die "usage: scripts/server.sh start|stop|status|add-user NAME READ|EDIT" ;;
esac
exit
fi
