#!/bin/sh
# Build one image per swe_mini sample: toolfleet/swe-mini-<name>:latest, FROM toolfleet/sandbox:latest
# (the worker's default image policy, toolfleet/*, admits them), and the "api" sample's second service,
# toolfleet/swe-mini-api-server:latest. No network, no registry:
#
#   sh examples/swe_mini/build_images.sh            # every repository under examples/swe_mini/repos
#   sh examples/swe_mini/build_images.sh calc leap  # some of them
#
# On a fleet, build (or load) the images on every worker host, or push them to a registry the workers
# pull from (toolfleet worker --registry HOST:PORT).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
base=${SWE_MINI_BASE:-toolfleet/sandbox:latest}
if [ "$#" -eq 0 ]; then
    set -- $(ls "$here/repos")
fi
build() {  # tag, dockerfile, context
    docker build --quiet --network none --build-arg "BASE=$base" --label toolfleet.example=swe_mini \
        -f "$2" -t "$1" "$3" >/dev/null
    echo "built $1"
}
for name in "$@"; do
    build "toolfleet/swe-mini-$name:latest" "$here/Dockerfile" "$here/repos/$name"
    if [ -d "$here/services/$name-server" ]; then
        build "toolfleet/swe-mini-$name-server:latest" "$here/services/$name-server/Dockerfile" "$here/services/$name-server"
    fi
done
