#!/bin/sh
# The local base image where no image registry can be reached: Debian bookworm (minbase) with
# Debian's Python 3.11 (and EXTRA, a comma-separated list of more Debian packages), made with
# debootstrap from Debian's packages and imported into the engine.
#
#   DOCKER_HOST=... containers/base-image.sh tokmaint-base:bookworm
#
# Kept once made (the engine holds it); debootstrap is installed when missing (as root).
set -eu
NAME=${1:-tokmaint-base:bookworm}
DOCKER=/usr/bin/docker
if "$DOCKER" image inspect "$NAME" >/dev/null 2>&1; then exit 0; fi
command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
ROOTFS=$(mktemp -d /var/tmp/tokmaint-base.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "base image: debootstrap bookworm with python3 into $ROOTFS (a few minutes)" >&2
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates${EXTRA:+,$EXTRA} \
    bookworm "$ROOTFS" http://deb.debian.org/debian >&2
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
chmod 755 "$ROOTFS"  # mktemp's 0700 would become the image's /, closed to every user but root
tar -C "$ROOTFS" -c . | "$DOCKER" import --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    - "$NAME" >/dev/null
echo "base image: $NAME" >&2
