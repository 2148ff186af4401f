#!/bin/sh
# scripts/check_floors.sh: the tree passes it, and it fails — naming the file and the include or
# the symbols — when an upward include or one of the circles cut when src/data got its rooms is
# put back (loader.c / mock.c / source.c; objective.c and the losses; fsdp.c / sharding.c; in
# src/model a layer that calls the block loop back, as dit_recompute.c did dit.c). The
# circles are put back at the level the check reads: one object of a copy of build/src replaced by
# a small one that defines the same symbol and calls back up, as the file did before the cut.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

out() { cat "$T/out"; }
check "the tree passes the floors check" sh -c 'scripts/check_floors.sh > "$1/out" 2>&1 || { cat "$1/out"; exit 1; }' _ "$T"

cp -r src "$T/src"
echo '#include "train/trainer.h"' >> "$T/src/data/formats/tar.c"
scripts/check_floors.sh --src "$T/src" > "$T/out" 2>&1
check "an upward include between folders fails, naming it" \
    sh -c 'test $0 = 1 && grep -q "data/formats/tar.c: includes \"train/trainer.h\", a floor above its own" "$1/out"' $? "$T"

cp -r src/. "$T/src/"
echo '#include "data/loader/loader.h"' >> "$T/src/data/formats/npy.c"
scripts/check_floors.sh --src "$T/src" > "$T/out" 2>&1
check "an upward include between data rooms fails, naming it" \
    sh -c 'test $0 = 1 && grep -q "data/formats/npy.c: includes \"data/loader/loader.h\", a data room above its own" "$1/out"' $? "$T"

# put_back NAME OBJECT C-SOURCE EXPECTED: a copy of the objects with OBJECT replaced
put_back() {
    rm -rf "$T/objs"; cp -r build/src "$T/objs"
    echo "$3" > "$T/back.c"
    cc -c -o "$T/objs/$2" "$T/back.c" || return 1
    scripts/check_floors.sh --objs "$T/objs" > "$T/out" 2>&1
    rc=$?
    check "$1" sh -c 'test $0 = 1 && grep -q "$2" "$1/out"' $rc "$T" "$4"
}
put_back "the source factory circle put back fails, naming its files" data/loader/pack_source.o \
    'int pack_source_create(void); int pack_source_pinned(void) { return pack_source_create(); }' \
    "circle of 4 files: data/loader/loader data/loader/mock data/loader/pack_source data/loader/source"
put_back "the objective dispatch circle put back fails, naming its files" diffusion/objective_batch.o \
    'int objective_loss_given(void); int objective_fetch(void) { return objective_loss_given(); }' \
    "diffusion/objective_batch -> diffusion/objective: objective_loss_given"
put_back "the fsdp / sharding circle put back fails, naming its files" parallel/fsdp_layout.o \
    'const char *dp_sharding_name(int); int fsdp_layout_init(void) { return dp_sharding_name(0) != 0; }' \
    "parallel/fsdp_layout -> parallel/sharding: dp_sharding_name"
put_back "a model layer calling the block loop back fails, naming its files" model/linear.o \
    'int dit_chunk_forward(void); int linear_forward(void) { return dit_chunk_forward(); }' \
    "model/linear -> model/dit: dit_chunk_forward"
[ "$FAILED" = 0 ] || { echo "last check's output:"; out; }
finish
