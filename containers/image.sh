#!/bin/sh
# make image: the tokmaint image, built offline from the local base and the host's wheels, then
# tried: every command's --help, and evolve on the shipped sample, inside the image.
#
#   DOCKER_HOST=... containers/image.sh tokmaint:0.1.0
#
# BASE (default: the local Debian base, made once by containers/base-image.sh) is any image with
# Python 3.11; BUILD_ARGS adds docker build arguments.
set -eu
IMAGE=${1:?usage: containers/image.sh NAME:TAG}
# The project image's base also has Java 17, for Flink (the stand-ins' has none), and Python's shared
# library, which a TaskManager loads for the job's Python in thread mode (PEMJA).
BASE=${BASE:-tokmaint-base:bookworm-jre17-libpython}
DOCKER=/usr/bin/docker
PIP=${PIP:-.venv/bin/pip}
HERE=$(dirname "$0")

[ "$BASE" != tokmaint-base:bookworm-jre17-libpython ] ||
    EXTRA=openjdk-17-jre-headless,procps,libpython3.11 "$HERE/base-image.sh" "$BASE"
# The wheels of every pin for the image's Python, made here (the host's pip verifies TLS, a build's
# cannot; the host's pip takes the CPU torch wheel). Debian's 3.11.2 also needs async-timeout
# (redis asks for it below 3.11.3), and the package's build needs setuptools>=68.
if [ ! -f wheelhouse/.complete ] || [ requirements.lock -nt wheelhouse/.complete ]; then
    echo "image: wheels for requirements.lock into wheelhouse/" >&2
    "$PIP" wheel --quiet --disable-pip-version-check -r requirements.lock "async-timeout>=4.0.3" "setuptools>=68" \
        --wheel-dir wheelhouse
    "$(dirname "$PIP")/python" -m pipeline.flink_jars download --into wheelhouse >/dev/null
    touch wheelhouse/.complete
fi
echo "image: building $IMAGE on $BASE" >&2
DOCKER_BUILDKIT=1 "$DOCKER" build --quiet --build-arg BASE="$BASE" --build-arg PIP_NO_INDEX=1 ${BUILD_ARGS:-} \
    -t "$IMAGE" . >/dev/null

echo "image: every command's --help in $IMAGE" >&2
"$DOCKER" run --rm -i --entrypoint python "$IMAGE" - <"$HERE/every_help.py"
echo "image: evolve on the shipped sample in $IMAGE" >&2
"$DOCKER" run --rm "$IMAGE" evolve --corpus /app/data/git-commits-sample.jsonl.gz --out /tmp/git --json \
    | python3 -c 'import json, sys; r = json.load(sys.stdin); assert r["versions"] > 1, r; print("evolve:", r["versions"], "versions")'
echo "image: $IMAGE" >&2
