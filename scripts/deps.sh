#!/bin/sh
# Installs the Debian packages vfm needs when any is missing; does nothing when all are present.
# Works as root on a fresh machine (uses sudo when not root and sudo exists). clang with its
# sanitizer/libFuzzer runtimes (libclang-rt-dev) and OpenMP (libomp-dev) builds the fuzz targets.
#   scripts/deps.sh            build and test dependencies
#   scripts/deps.sh --goldens  also python3-torch and numpy, to regenerate golden files
set -e
PKGS="gcc make libopenblas-dev libopenblas-openmp-dev libyaml-dev libjansson-dev libsqlite3-dev libopenmpi-dev openmpi-bin clang libclang-rt-dev libomp-dev"
if [ "$1" = "--goldens" ]; then PKGS="$PKGS python3-torch python3-numpy"; fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "deps: installing$missing"
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "deps: missing packages:$missing — run as root or install them" >&2; exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: done"
