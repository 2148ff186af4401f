#!/bin/sh
# Installs the Debian packages vfm needs when any is missing; does nothing when all are present.
# Works as root on a fresh machine (uses sudo when not root and sudo exists). clang with its
# sanitizer/libFuzzer runtimes (libclang-rt-dev) and OpenMP (libomp-dev) builds the fuzz targets.
#   scripts/deps.sh            build and test dependencies
#   scripts/deps.sh --test     also Slurm (slurm-wlm, munge) for the tests' one-node cluster
#   scripts/deps.sh --goldens  also python3-torch and numpy, to regenerate golden files
#   scripts/deps.sh --cudnn-frontend VERSION DIR
#                              only the header-only cudnn-frontend (PyPI nvidia-cudnn-frontend==VERSION)
#                              unpacked into DIR/include; the Makefile calls this when nvcc is found
#                              (build-local: nothing is installed)
set -e

# The wheel ships the C++ headers under include/ beside its Python module; any platform's wheel has
# the same headers, so the download is pinned to one (Python 3.11, manylinux x86-64) and works with
# any local Python. `pip download` installs nothing, so Debian's externally managed pip allows it.
fetch_cudnn_frontend() {
    version=$1; dir=$2
    [ -f "$dir/include/cudnn_frontend.h" ] && return 0
    pip=""
    for p in "python3 -m pip" pip3 pip; do
        if $p --version >/dev/null 2>&1; then pip=$p; break; fi
    done
    if [ -z "$pip" ]; then
        install_debs python3-pip
        pip="python3 -m pip"
    fi
    command -v unzip >/dev/null 2>&1 || install_debs unzip
    tmp=$(mktemp -d)
    echo "deps: fetching nvidia-cudnn-frontend==$version (C++ headers) into $dir"
    if ! $pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
            --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$version"; then
        rm -rf "$tmp"
        echo "deps: could not download nvidia-cudnn-frontend==$version from PyPI" >&2
        echo "      (build without the cuDNN attention: make NO_CUDNN_FE=1)" >&2
        return 1
    fi
    mkdir -p "$dir"
    unzip -q -o "$tmp"/nvidia_cudnn_frontend-*.whl 'include/*' -d "$dir"
    rm -rf "$tmp"
    if [ ! -f "$dir/include/cudnn_frontend.h" ]; then
        echo "deps: the nvidia-cudnn-frontend==$version wheel has no include/cudnn_frontend.h" >&2
        return 1
    fi
}

install_debs() {
    SUDO=""
    if [ "$(id -u)" != "0" ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
            echo "deps: missing packages: $* — run as root or install them" >&2; exit 1
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq
    $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "$@" >/dev/null
}

if [ "$1" = "--cudnn-frontend" ]; then
    fetch_cudnn_frontend "$2" "$3"
    exit $?
fi

PKGS="gcc g++ make unzip libopenblas-dev libopenblas-openmp-dev libyaml-dev libjansson-dev libsqlite3-dev libopenmpi-dev openmpi-bin"
PKGS="$PKGS libpng-dev libjpeg62-turbo-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg"
PKGS="$PKGS clang libclang-rt-dev libomp-dev"
if [ "$1" = "--goldens" ]; then PKGS="$PKGS python3-torch python3-numpy"; fi
# the tests' one-node Slurm cluster (tests/mpi/slurm.sh)
if [ "$1" = "--test" ]; then PKGS="$PKGS slurm-wlm munge"; fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    # shellcheck disable=SC2086
    install_debs $missing
    echo "deps: done"
fi

exit 0
