#!/bin/sh
# `make gpu-bundle`: the binaries built here and the shared libraries they need that a GPU machine
# may lack, packed into build/gpu-bundle.tgz (the one path a GPU session carries; the working tree
# and carried files must stay under 64 MiB together). Never carried: glibc's own pieces (libc, libm,
# libpthread, libdl, librt, ld-linux and the rest of Debian's libc6 package), libstdc++ and libgcc_s:
# every machine that runs CUDA programs has its own, as new as or newer than ours, and copies of
# Debian's on the library path there could break every program started with it (python3,
# nvidia-smi, compute-sanitizer). On the GPU machine scripts/gpu_run.sh puts on the library path
# only the carried libraries that machine's loader does not already know.
# Prints the bundle's size and its list of libraries; fails when it is larger than
# GPU_BUNDLE_MAX_MIB (48) or when a glibc piece got in.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
MAX=${GPU_BUNDLE_MAX_MIB:-48}
bins="$BUILD/vfm $BUILD/vfm-faults $BUILD/vfm_tests $BUILD/vfm_mpi_tests"
libs=$BUILD/gpu-libs
for b in $bins; do [ -x "$b" ] || { echo "gpu-bundle: $b is missing (make all)" >&2; exit 1; }; done

# glibc, libstdc++, libgcc_s: by name, and by Debian package where dpkg knows the file
is_system() { # soname path
    case "$1" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|libresolv.so.*|libnsl.so.*|libanl.so.*|\
    ld-linux*|libmvec.so.*|libcrypt.so.*|libnss_*|libthread_db.so.*|libBrokenLocale.so.*|libc_malloc_debug.so.*|\
    libmemusage.so|libpcprofile.so|libstdc++.so.*|libgcc_s.so.*) return 0 ;;
    esac
    command -v dpkg > /dev/null 2>&1 || return 1
    pkg=$(dpkg -S "$2" 2>/dev/null || dpkg -S "$(readlink -f "$2")" 2>/dev/null)
    case "${pkg%%:*}" in libc6|libc6-*|libstdc++6|libgcc-s1) return 0 ;; esac
    return 1
}

rm -rf "$libs" && mkdir -p "$libs" || exit 1
for b in $bins; do ldd "$b"; done | awk '/=> \// {print $1, $3}' | sort -u > "$libs.list"
while read -r soname path; do
    is_system "$soname" "$path" && continue
    cp -L "$path" "$libs/$soname" || exit 1
done < "$libs.list"
rm -f "$libs.list"

for f in "$libs"/*; do
    [ -e "$f" ] || continue
    if is_system "$(basename "$f")" "$f"; then echo "gpu-bundle: $f is part of glibc/libstdc++: not carried" >&2; exit 1; fi
done
tar czf "$BUILD/gpu-bundle.tgz" $bins "$libs" || exit 1
size=$(du -m "$BUILD/gpu-bundle.tgz" | cut -f1)
kib=$(du -k "$BUILD/gpu-bundle.tgz" | cut -f1)
tree=$(git ls-files -z | du -mc --files0-from=- 2> /dev/null | tail -n 1 | cut -f1)
n=$(ls "$libs" | wc -l)
echo "gpu-bundle: $BUILD/gpu-bundle.tgz ($kib KiB: 3 binaries + $n libraries), tracked tree $tree MiB"
for f in "$libs"/*; do [ -e "$f" ] && echo "  $(basename "$f") ($(du -k "$f" | cut -f1) KiB)"; done
echo "gpu-bundle: carry [\"$BUILD/gpu-bundle.tgz\"]; on the GPU machine: scripts/gpu_check.sh (then scripts/gpu_check2.sh)"
if [ "$size" -gt "$MAX" ]; then echo "gpu-bundle: larger than $MAX MiB" >&2; exit 1; fi
