#!/bin/sh
# A Docker engine for the project's targets (make engine / engine-stop / image ...).
#
#   containers/engine.sh start        # prints the DOCKER_HOST to use; starts an engine of ours when none answers
#   containers/engine.sh stop         # stops the engine this script started (nothing else)
#   containers/engine.sh run CMD ...  # CMD with DOCKER_HOST set; an engine started for it is stopped after
#
# With TOKMAINT_ENGINE_OPTIONAL=1, run runs CMD without DOCKER_HOST where no engine can be had
# (make test: its servers are then local binaries), after saying so.
#
# An engine that answers already (DOCKER_HOST, or the default socket) is used as it is. Otherwise
# Debian's docker.io (installed when missing, as root) runs as an engine of our own, with no
# iptables (a machine without netfilter), its data, socket and log (dockerd.log) under
# TOKMAINT_ENGINE_ROOT. Its storage driver is overlay2, or vfs where overlay2 cannot run a
# container (vfs copies an image whole for every container: a 2 GB image takes ~30 s to start).
set -eu
ROOT=${TOKMAINT_ENGINE_ROOT:-/var/lib/tokmaint-engine}
SOCKET=unix://$ROOT/docker.sock
DOCKER=/usr/bin/docker  # Debian's client: it builds with BuildKit by itself (a newer one asks for buildx)

answers() { DOCKER_HOST=$1 "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

case "${1:-start}" in
run)
    shift
    started=
    if ! { [ -x "$DOCKER" ] && { { [ -n "${DOCKER_HOST:-}" ] && answers "$DOCKER_HOST"; } \
            || answers unix:///var/run/docker.sock || answers "$SOCKET"; }; }; then
        started=yes
    fi
    if DOCKER_HOST=$("$0" start); then
        export DOCKER_HOST
    elif [ -n "${TOKMAINT_ENGINE_OPTIONAL:-}" ]; then
        echo "engine: none could be started; running without one: $*" >&2
        unset DOCKER_HOST
        started=
    else
        exit 1
    fi
    status=0
    "$@" || status=$?
    if [ -n "$started" ]; then "$0" stop; fi
    exit $status
    ;;
start)
    if [ -x "$DOCKER" ]; then
        if [ -n "${DOCKER_HOST:-}" ] && answers "$DOCKER_HOST"; then echo "$DOCKER_HOST"; exit 0; fi
        if answers unix:///var/run/docker.sock; then echo unix:///var/run/docker.sock; exit 0; fi
        if answers "$SOCKET"; then echo "$SOCKET"; exit 0; fi
    fi
    if ! command -v dockerd >/dev/null || [ ! -x "$DOCKER" ]; then
        echo "engine: no Docker engine answers; installing Debian's docker.io" >&2
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >&2
    fi
    mkdir -p "$ROOT"
    for driver in ${TOKMAINT_ENGINE_STORAGE:-overlay2 vfs}; do
        echo "engine: starting an engine of our own ($driver, no iptables) at $SOCKET; make engine-stop stops it" >&2
        nohup dockerd --storage-driver="$driver" --iptables=false --data-root "$ROOT/data" --exec-root "$ROOT/exec" \
            --pidfile "$ROOT/dockerd.pid" -H "$SOCKET" >"$ROOT/dockerd.log" 2>&1 &
        for _ in $(seq 1 60); do
            if answers "$SOCKET"; then echo "$SOCKET"; exit 0; fi
            sleep 0.5
        done
        echo "engine: dockerd with $driver did not answer within 30 s; its log: $ROOT/dockerd.log" >&2
        tail -3 "$ROOT/dockerd.log" >&2
        "$0" stop
    done
    exit 1
    ;;
stop)
    if [ -f "$ROOT/dockerd.pid" ]; then
        kill "$(cat "$ROOT/dockerd.pid")" 2>/dev/null || true
        for _ in $(seq 1 60); do [ -f "$ROOT/dockerd.pid" ] || break; sleep 0.5; done
        echo "engine: stopped the engine at $SOCKET" >&2
    fi
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
