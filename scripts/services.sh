#!/usr/bin/env bash
# Installs (when missing) and starts the real servers the distributed tests use, natively, on
# loopback only: PostgreSQL, Redis, an S3-compatible server (moto) and a Kafka-protocol broker
# (tansu, built from crates.io the first time: about 11 minutes). No container engine needed.
#
#   scripts/services.sh start   # install what is missing, start everything, wait until ready
#   scripts/services.sh env     # print the environment the tests read (after start)
#   scripts/services.sh stop    # stop everything this script started
#
# State lives in $STRATA_SERVICES_DIR (default /tmp/strata-services: PostgreSQL refuses data
# directories its OS user cannot reach, such as anything under /root). Tools installed from PyPI
# are kept in $STRATA_TOOLS_DIR (default ~/.cache/strata-tools) so a second run skips the install.
set -euo pipefail

DIR=${STRATA_SERVICES_DIR:-/tmp/strata-services}
TOOLS=${STRATA_TOOLS_DIR:-$HOME/.cache/strata-tools}
PG_PORT=${STRATA_PG_PORT:-55432}
REDIS_PORT=${STRATA_REDIS_PORT:-56379}
S3_PORT=${STRATA_S3_PORT:-55900}
KAFKA_PORT=${STRATA_KAFKA_PORT:-59092}
TANSU_VERSION=0.6.0
MOTO_VERSION=5.2.5
FASTAVRO_VERSION=1.13.1
CONFLUENT_KAFKA_VERSION=2.6.1
BUCKET=strata-test

log() { echo "services: $*" >&2; }
die() { echo "services: error: $*" >&2; exit 1; }

apt_updated=0
apt_install() {
    if [ "$apt_updated" = 0 ]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
        apt_updated=1
    fi
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

pg_bindir() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

wait_for() { # description, attempts (x0.1 s), command...
    local what=$1 tries=$2
    shift 2
    for _ in $(seq "$tries"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    die "$what did not become ready"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_postgres() {
    local bin
    bin=$(pg_bindir) || true
    if [ -z "${bin:-}" ]; then
        apt_install postgresql
        bin=$(pg_bindir) || die "postgresql installed but initdb not found"
    fi
    local data=$DIR/pg
    if [ -f "$data/postmaster.pid" ] && runuser -u postgres -- "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        log "postgresql already running"
        return
    fi
    port_free "$PG_PORT" || die "port $PG_PORT is taken (set STRATA_PG_PORT)"
    if [ ! -f "$data/PG_VERSION" ]; then
        rm -rf "$data"
        mkdir -p "$data"
        chown postgres "$data"
        runuser -u postgres -- "$bin/initdb" -D "$data" -U postgres -A trust --no-sync -E UTF8 \
            --locale=C.UTF-8 >"$DIR/pg-initdb.log" 2>&1 || die "initdb failed: see $DIR/pg-initdb.log"
    fi
    # fsync=off: test data only; benchmarks that claim durability must not use this server.
    runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $data -c fsync=off -c max_connections=200" \
        start >/dev/null || die "postgresql did not start: see $data/server.log"
    wait_for postgresql 100 "$bin/pg_isready" -h 127.0.0.1 -p "$PG_PORT"
    log "postgresql ready on 127.0.0.1:$PG_PORT"
}

start_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    if [ -f "$DIR/redis.pid" ] && kill -0 "$(cat "$DIR/redis.pid")" 2>/dev/null; then
        log "redis already running"
        return
    fi
    port_free "$REDIS_PORT" || die "port $REDIS_PORT is taken (set STRATA_REDIS_PORT)"
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
        --dir "$DIR" --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" >/dev/null \
        || die "redis did not start: see $DIR/redis.log"
    wait_for redis 100 redis-cli -p "$REDIS_PORT" ping
    log "redis ready on 127.0.0.1:$REDIS_PORT"
}

start_s3() {
    local venv=$TOOLS/moto-$MOTO_VERSION
    if [ ! -x "$venv/bin/moto_server" ]; then
        command -v python3 >/dev/null || apt_install python3 python3-venv
        python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv"; }
        log "installing moto $MOTO_VERSION from PyPI"
        "$venv/bin/pip" install -q "moto[server]==$MOTO_VERSION" || die "pip install moto failed"
    fi
    # fastavro: the independent implementation the codec's schema fingerprints are checked against.
    if ! "$venv/bin/python" -c "import fastavro; assert fastavro.__version__ == '$FASTAVRO_VERSION'" 2>/dev/null; then
        log "installing fastavro $FASTAVRO_VERSION from PyPI"
        "$venv/bin/pip" install -q "fastavro==$FASTAVRO_VERSION" || die "pip install fastavro failed"
    fi
    # confluent-kafka (librdkafka): the non-Rust producer of the direct-producer tests.
    if ! "$venv/bin/python" -c "import confluent_kafka as c; assert c.__version__ == '$CONFLUENT_KAFKA_VERSION'" 2>/dev/null; then
        log "installing confluent-kafka $CONFLUENT_KAFKA_VERSION from PyPI"
        "$venv/bin/pip" install -q "confluent-kafka==$CONFLUENT_KAFKA_VERSION" \
            || die "pip install confluent-kafka failed"
    fi
    if [ -f "$DIR/moto.pid" ] && kill -0 "$(cat "$DIR/moto.pid")" 2>/dev/null; then
        log "moto already running"
        return
    fi
    port_free "$S3_PORT" || die "port $S3_PORT is taken (set STRATA_S3_PORT)"
    nohup "$venv/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" </dev/null >"$DIR/moto.log" 2>&1 &
    echo $! >"$DIR/moto.pid"
    wait_for "moto (S3)" 200 curl -sf -o /dev/null "http://127.0.0.1:$S3_PORT/moto-api/"
    curl -sf -X PUT "http://127.0.0.1:$S3_PORT/$BUCKET" >/dev/null || die "cannot create bucket $BUCKET"
    log "s3 (moto) ready on 127.0.0.1:$S3_PORT, bucket $BUCKET"
}

start_kafka() {
    local bin=$HOME/.cargo/bin/tansu
    if ! { [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$TANSU_VERSION"; }; then
        log "building tansu $TANSU_VERSION from crates.io (about 11 minutes, once)"
        cargo install tansu --version "$TANSU_VERSION" --locked --features libsql \
            >"$DIR/tansu-install.log" 2>&1 || die "cargo install tansu failed: see $DIR/tansu-install.log"
    fi
    if [ -f "$DIR/tansu.pid" ] && kill -0 "$(cat "$DIR/tansu.pid")" 2>/dev/null; then
        log "tansu already running"
        return
    fi
    port_free "$KAFKA_PORT" || die "port $KAFKA_PORT is taken (set STRATA_KAFKA_PORT)"
    local attempt
    for attempt in 1 2 3; do
        if launch_tansu "$bin"; then
            log "kafka (tansu) ready on 127.0.0.1:$KAFKA_PORT"
            return
        fi
        log "tansu failed to start (attempt $attempt): $(tail -n 1 "$DIR/tansu.log" 2>/dev/null)"
        stop_kafka
    done
    die "tansu (kafka) did not become ready: see $DIR/tansu.log"
}

# Starts tansu on a fresh state and adds the index it lacks; fails if it does not come up.
launch_tansu() {
    local bin=$1
    # A fresh broker state every start: tests create their own topics.
    rm -rf "$DIR/tansu"
    mkdir -p "$DIR/tansu"
    # tansu's sqlite path is relative to its working directory; it listens on IPv4 only.
    (cd "$DIR/tansu" && exec "$bin" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
        --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
        --storage-engine sqlite://tansu.db </dev/null >"$DIR/tansu.log" 2>&1) &
    echo $! >"$DIR/tansu.pid"
    # Wait until it serves: its schema is complete then. (Touching the database while it still
    # creates the schema makes a migration fail with "database is locked", and tansu exits.)
    local pid ok=0
    pid=$(cat "$DIR/tansu.pid")
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || return 1
        if (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then ok=1; break; fi
        sleep 0.1
    done
    [ "$ok" = 1 ] || return 1
    # tansu 0.6.0 lacks this index: without it fetches slow down until the broker stops answering.
    ok=0
    for _ in $(seq 100); do
        if python3 - "$DIR/tansu/tansu.db" <<'PY' 2>/dev/null
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'header'").fetchone():
    sys.exit(1)
db.execute("CREATE INDEX IF NOT EXISTS header_tp_off ON header(topition, offset_id)")
db.commit()
PY
        then ok=1; break; fi
        sleep 0.1
    done
    [ "$ok" = 1 ] || return 1
    kill -0 "$pid" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null
}


print_env() {
    cat <<EOF
export STRATA_TEST_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT
export STRATA_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$PG_PORT/postgres
export STRATA_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/
export STRATA_TEST_S3_URL=s3://$BUCKET/strata-test
export AWS_ENDPOINT_URL=http://127.0.0.1:$S3_PORT
export AWS_ACCESS_KEY_ID=strata-test
export AWS_SECRET_ACCESS_KEY=strata-test
export AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true
export STRATA_TEST_PYTHON=$TOOLS/moto-$MOTO_VERSION/bin/python
EOF
}

stop_kafka() {
    if [ -f "$DIR/tansu.pid" ]; then
        local pid
        pid=$(cat "$DIR/tansu.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$DIR/tansu.pid"
    fi
}

stop_all() {
    local bin
    bin=$(pg_bindir) || true
    if [ -n "${bin:-}" ] && [ -f "$DIR/pg/postmaster.pid" ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if [ -f "$DIR/redis.pid" ]; then
        redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill "$(cat "$DIR/redis.pid")" 2>/dev/null || true
        rm -f "$DIR/redis.pid"
    fi
    if [ -f "$DIR/moto.pid" ]; then
        kill "$(cat "$DIR/moto.pid")" 2>/dev/null || true
        rm -f "$DIR/moto.pid"
    fi
    stop_kafka
    log "stopped"
}

case "${1:-}" in
    start)
        [ "$(id -u)" = 0 ] || die "run as root (installs packages, runs PostgreSQL as the postgres user)"
        mkdir -p "$DIR" "$TOOLS"
        chmod 755 "$DIR"
        command -v curl >/dev/null || apt_install curl
        start_postgres
        start_redis
        start_s3
        start_kafka
        print_env >"$DIR/env"
        ;;
    env) print_env ;;
    stop) stop_all ;;
    *) die "usage: $0 start|env|stop" ;;
esac
