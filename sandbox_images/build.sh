#!/usr/bin/env bash
# Build toolfleet's sandbox images without a container registry.
#
#   toolfleet/debian-base:bookworm  debootstrap --variant=minbase rootfs, `docker import`ed (no python3:
#                                   the image the fallback exec path is tested on)
#   toolfleet/sandbox:latest        bash, python3, coreutils, git, procps + a non-root user `sandbox`
#
# Idempotent and cached by tag: an image that already exists is not rebuilt (FORCE=1 rebuilds).
# The Debian mirror is read from /etc/apt/sources.list* (deb822 `URIs:` or one-line `deb URI ...`);
# set DEBIAN_MIRROR to override. Never hard-code a mirror host here.
# With a registry available, BASE_IMAGE=debian:bookworm-slim (or any Debian image) skips debootstrap
# for the sandbox image: the Dockerfile installs what is missing with apt.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SUITE="${SUITE:-bookworm}"
BASE_TAG="${BASE_TAG:-toolfleet/debian-base:${SUITE}}"
ROOTFS_TAG="${ROOTFS_TAG:-toolfleet/sandbox-rootfs:${SUITE}}"
SANDBOX_TAG="${SANDBOX_TAG:-toolfleet/sandbox:latest}"
PACKAGES="${PACKAGES:-bash,python3,coreutils,git,procps,ca-certificates}"
CACHE_DIR="${CACHE_DIR:-/var/cache/toolfleet-debootstrap}"
FORCE="${FORCE:-0}"

log() { printf '[build.sh] %s\n' "$*" >&2; }

have_image() { [[ "$FORCE" != 1 ]] && docker image inspect "$1" >/dev/null 2>&1; }

find_mirror() {
    if [[ -n "${DEBIAN_MIRROR:-}" ]]; then echo "$DEBIAN_MIRROR"; return; fi
    local files=() f uri
    [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
        [[ -f "$f" ]] && files+=("$f")
    done
    # Prefer the main archive (a URI ending in /debian) over security/updates/third-party repos.
    uri="$(grep -hE '^\s*(URIs:|deb\s)' "${files[@]}" 2>/dev/null \
        | sed -E 's/^\s*URIs:\s*//; s/^\s*deb\s+(\[[^]]*\]\s+)?//' | awk '{print $1}' \
        | grep -E '/debian/?$' | head -n1 || true)"
    if [[ -z "$uri" ]]; then
        log "no Debian mirror found in /etc/apt/sources.list*; set DEBIAN_MIRROR"; exit 1
    fi
    echo "${uri%/}"
}

# debootstrap a rootfs into a temp dir and `docker import` it as $1 (extra debootstrap args follow).
bootstrap_import() {
    local tag="$1"; shift
    local mirror rootfs
    mirror="$(find_mirror)"
    rootfs="$(mktemp -d /tmp/toolfleet-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' RETURN
    mkdir -p "$CACHE_DIR"
    log "debootstrap $SUITE from $mirror into $rootfs ($*) — this takes a few minutes"
    debootstrap --variant=minbase --cache-dir="$CACHE_DIR" "$@" "$SUITE" "$rootfs" "$mirror" >&2
    # Keep images small: no package lists or docs are needed at run time.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
    log "docker import -> $tag"
    tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/sh"]' - "$tag" >/dev/null
}

command -v docker >/dev/null || { log "docker CLI not found"; exit 1; }

if have_image "$BASE_TAG"; then
    log "$BASE_TAG exists (cached)"
else
    bootstrap_import "$BASE_TAG"
fi

# The sandbox image is also keyed by its recipe: editing sandbox/ rebuilds it (the base is not redone).
RECIPE_HASH="$(cat "$HERE"/sandbox/* | sha256sum | cut -c1-16)"
if have_image "$SANDBOX_TAG" && [[ "$(docker image inspect --format '{{ index .Config.Labels "toolfleet.recipe" }}' "$SANDBOX_TAG")" == "$RECIPE_HASH" ]]; then
    log "$SANDBOX_TAG exists (cached, recipe $RECIPE_HASH)"
    exit 0
fi

if [[ -n "${BASE_IMAGE:-}" ]]; then
    FROM="$BASE_IMAGE"
else
    FROM="$ROOTFS_TAG"
    if have_image "$ROOTFS_TAG"; then
        log "$ROOTFS_TAG exists (cached)"
    else
        bootstrap_import "$ROOTFS_TAG" --include="$PACKAGES"
    fi
fi

log "docker build -> $SANDBOX_TAG (FROM $FROM)"
# --network none: with a debootstrapped base nothing needs fetching, so the build cannot depend on
# container networking; a BASE_IMAGE that lacks packages needs the network (apt) and gets it.
NET=(--network none)
[[ -n "${BASE_IMAGE:-}" ]] && NET=()
docker build "${NET[@]}" --build-arg BASE_IMAGE="$FROM" --label "toolfleet.recipe=$RECIPE_HASH" \
    -t "$SANDBOX_TAG" "$HERE/sandbox" >&2
log "done: $BASE_TAG $SANDBOX_TAG"
