#!/bin/sh
# Build one image per swe_mini sample: toolfleet/swe-mini-<name>:latest, FROM toolfleet/sandbox:latest
# (the worker's default image policy, toolfleet/*, admits them). No network, no registry:
#
#   sh examples/swe_mini/build_images.sh            # every repository under examples/swe_mini/repos
#   sh examples/swe_mini/build_images.sh calc leap  # some of them
#
# On a fleet, build (or load) the images on every worker host: placement does not move images yet.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
base=${SWE_MINI_BASE:-toolfleet/sandbox:latest}
if [ "$#" -eq 0 ]; then
    set -- $(ls "$here/repos")
fi
for name in "$@"; do
    docker build --quiet --network none --build-arg "BASE=$base" --label toolfleet.example=swe_mini \
        -f "$here/Dockerfile" -t "toolfleet/swe-mini-$name:latest" "$here/repos/$name" >/dev/null
    echo "built toolfleet/swe-mini-$name:latest"
done
