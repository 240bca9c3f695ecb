#!/usr/bin/env bash
# Bring the compose stack up with 2 workers, run an eval through it (and a multi-service sample), check
# the log, tear it down.
#
#   deploy/compose-smoke.sh                                   # public base image (needs a registry)
#   BASE_IMAGE=toolfleet/sandbox-rootfs:bookworm deploy/compose-smoke.sh   # offline (sandbox_images/build.sh first)
#   COMPOSE="docker compose" deploy/compose-smoke.sh          # compose v2 (default: docker-compose v1)
#
# Exit status 0 when every sample of the eval finished without error. Bounded: each step has a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPOSE=${COMPOSE:-docker-compose}
WORKERS=${WORKERS:-2}
export FLEET_WORKERS=$WORKERS EVAL_LIMIT=${EVAL_LIMIT:-6} COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-toolfleet-smoke}
LOGS=$(mktemp -d)
export TOOLFLEET_LOG_DIR=$LOGS   # the orchestrator's /logs
# The workers (host network) reach Redis on a port published on the host's loopback: a free one.
export REDIS_HOST_PORT=${REDIS_HOST_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
trap 'timeout 180 $COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true; rm -f deploy/docker/extra-ca.crt' EXIT

deploy/make-secrets.sh
timeout 120 $COMPOSE config -q
if [ -n "${EXTRA_CA:-}" ]; then cp "$EXTRA_CA" deploy/docker/extra-ca.crt; fi   # e.g. EXTRA_CA=/etc/ssl/certs/ca-certificates.crt
echo "== build"
timeout 1800 $COMPOSE build
echo "== up: redis + $WORKERS workers"
timeout 300 $COMPOSE up -d --scale worker="$WORKERS" redis worker
echo "== eval through the fleet"
timeout 1200 $COMPOSE run --rm --no-deps orchestrator
echo "== a multi-service sample through the fleet (swe_mini's api: its client, and a price service beside it)"
# The workers use the host's Docker (the socket), so the example's images are built there.
SWE_MINI_BASE=${SWE_MINI_BASE:-toolfleet/sandbox:latest} timeout 900 sh examples/swe_mini/build_images.sh api
timeout 600 $COMPOSE run --rm --no-deps orchestrator toolfleet eval examples/swe_mini.py -T names=api \
    --model scripted/fixer --log-dir /logs --display none | tee "$LOGS/pod.txt"
grep -q "tests_pass: accuracy=1.000" "$LOGS/pod.txt"
echo "== celery inspect"
timeout 120 $COMPOSE exec -T worker celery -A workers.app inspect ping --timeout 10 | tee "$LOGS/inspect.txt"
test "$(grep -c pong "$LOGS/inspect.txt")" -ge "$WORKERS"
echo "== a task's own tools from a worker image (deploy/build-tools-image.sh)"
TOOLS=("$COMPOSE" -f docker-compose.yml -f deploy/compose.tools.yml)
export TOOLS_IMAGE=toolfleet/toolfleet-tools:smoke
cp -r examples/task_tools "$LOGS/task_tools"   # its wheel is built outside the tree
timeout 900 deploy/build-tools-image.sh "$LOGS/task_tools" shouty.tools "$TOOLS_IMAGE"
wait_for_workers() {   # the recreated workers all answer a ping (bounded)
    for _ in $(seq 60); do
        if [ "$(timeout 30 $COMPOSE exec -T worker celery -A workers.app inspect ping --timeout 5 2>/dev/null | grep -c pong)" -ge "$WORKERS" ]; then
            return 0
        fi
        sleep 2
    done
    echo "workers did not come back" >&2
    return 1
}
timeout 300 "${TOOLS[@]}" up -d --no-build --scale worker="$WORKERS" worker
wait_for_workers
timeout 600 "${TOOLS[@]}" run --rm --no-deps orchestrator toolfleet eval examples/task_tools_eval.py \
    --model scripted --log-dir /logs --display none | tee "$LOGS/tools.txt"
grep -q "includes: accuracy=1.000" "$LOGS/tools.txt"
echo "== the same task on workers without its tools: refused before any sample, in one line"
timeout 300 $COMPOSE up -d --no-build --scale worker="$WORKERS" worker
wait_for_workers
if timeout 600 "${TOOLS[@]}" run --rm --no-deps orchestrator toolfleet eval examples/task_tools_eval.py \
    --model scripted --log-dir /logs --display none >"$LOGS/no-tools.txt" 2>&1; then
    echo "expected the eval to be refused" >&2
    exit 1
fi
cat "$LOGS/no-tools.txt"
grep -q "Tool 'shout' (module shouty.tools) is registered on no live worker" "$LOGS/no-tools.txt"
echo "== result"
timeout 120 $COMPOSE run --rm --no-deps orchestrator toolfleet log list --log-dir /logs | tee "$LOGS/summary.txt"
echo "smoke OK (logs in $LOGS)"
