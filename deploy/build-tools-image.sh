#!/usr/bin/env bash
# Build a worker image that carries a task's own tools (docs/task-code.md).
#
#   deploy/build-tools-image.sh PACKAGE_DIR_OR_WHEEL MODULES [TAG]
#   deploy/build-tools-image.sh ../mypkg mypkg.tools myorg/toolfleet-tools:1
#   TOOLFLEET_IMAGE=toolfleet/toolfleet:latest deploy/build-tools-image.sh dist/mypkg-1.0-py3-none-any.whl mypkg.tools
#
# PACKAGE_DIR_OR_WHEEL: a project directory (its wheel is built here with `pip wheel --no-deps`, which needs
# the project's build backend, or an index to fetch it from) or a ready .whl. MODULES: comma-separated modules every
# worker imports at start. The image is FROM $TOOLFLEET_IMAGE (default toolfleet/toolfleet:latest, what
# docker-compose.yml builds); nothing is pulled from a registry when that image is local.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
    sed -n '2,11p' "$0" >&2
    exit 2
fi
SOURCE=$1 MODULES=$2 TAG=${3:-toolfleet/toolfleet-tools:latest}
TOOLFLEET_IMAGE=${TOOLFLEET_IMAGE:-toolfleet/toolfleet:latest}
CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT

if [ -d "$SOURCE" ]; then
    timeout 600 python3 -m pip wheel --no-deps --wheel-dir "$CONTEXT" "$SOURCE" >&2
elif [ -f "$SOURCE" ] && [ "${SOURCE%.whl}" != "$SOURCE" ]; then
    cp "$SOURCE" "$CONTEXT/"
else
    echo "build-tools-image: $SOURCE is neither a project directory nor a .whl file" >&2
    exit 2
fi
timeout 1800 docker build -f deploy/docker/Dockerfile.tools --build-arg TOOLFLEET_IMAGE="$TOOLFLEET_IMAGE" \
    --build-arg TOOL_MODULES="$MODULES" -t "$TAG" "$CONTEXT"
echo "built $TAG (workers import: $MODULES)"
