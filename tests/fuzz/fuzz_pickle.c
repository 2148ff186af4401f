/* Fuzz target: the whitelist unpickler (src/data/formats/pickle.c) on one input's bytes: the program run
 * to its STOP (without the _load_from_bytes hook) and every value it built walked; then the torch
 * readers on the same bytes (a `.pickle` part: pickle.dumps of a tensor with its nested legacy
 * torch.save blob, and a legacy torch.save stream; torch_check.h). */
#include <string.h>

#include "data/formats/pickle.h"
#include "torch_check.h"

FUZZ_QUIET_INITIALIZE

/* Visits v and what it holds, depth-first, at most *budget values (memo references can make the
 * graph share nodes, even cycle through a list appended to itself). */
static void walk(const PickleValue *v, int depth, int64_t *budget) {
    if (!v || depth > 200 || --*budget < 0) return;
    FUZZ_CHECK(v->kind >= PK_NONE && v->kind <= PK_TENSOR, "kind %d", (int)v->kind);
    switch (v->kind) {
    case PK_STR:
        FUZZ_CHECK(v->u.s.ptr[v->u.s.len] == 0, "str not NUL-terminated");
        fuzz_touch(v->u.s.ptr, v->u.s.len);
        break;
    case PK_BYTES:
    case PK_BIGINT: fuzz_touch(v->u.s.ptr, v->u.s.len); break;
    case PK_TUPLE:
    case PK_LIST:
        FUZZ_CHECK(v->u.seq.n >= 0 && v->u.seq.n <= v->u.seq.cap, "sequence of %lld", (long long)v->u.seq.n);
        for (int64_t i = 0; i < v->u.seq.n; i++) walk(v->u.seq.items[i], depth + 1, budget);
        break;
    case PK_DICT:
        FUZZ_CHECK(v->u.dict.n >= 0 && v->u.dict.n <= v->u.dict.cap, "dict of %lld", (long long)v->u.dict.n);
        for (int64_t i = 0; i < v->u.dict.n; i++) {
            walk(v->u.dict.keys[i], depth + 1, budget);
            walk(v->u.dict.values[i], depth + 1, budget);
        }
        break;
    case PK_GLOBAL:
        FUZZ_CHECK(pickle_global_allowed(v->u.global.module, v->u.global.name), "global %s.%s is not whitelisted",
                   v->u.global.module, v->u.global.name);
        break;
    case PK_STORAGE:
        FUZZ_CHECK(v->u.storage.numel >= 0, "storage of %lld elements", (long long)v->u.storage.numel);
        if (v->u.storage.resolved)
            fuzz_touch(v->u.storage.data, (size_t)v->u.storage.numel * (size_t)torch_dtype_size(v->u.storage.dtype));
        break;
    case PK_TENSOR:
        FUZZ_CHECK(v->u.tensor.ndim >= 0 && v->u.tensor.ndim <= TORCH_MAX_DIMS, "tensor ndim %d", v->u.tensor.ndim);
        FUZZ_CHECK(v->u.tensor.storage && v->u.tensor.storage->kind == PK_STORAGE, "tensor without a storage");
        walk(v->u.tensor.storage, depth + 1, budget);
        break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Pickle *p;
    FUZZ_CHECK(pickle_session(&p, "fuzz.pickle", NULL, NULL) == VFM_OK, "pickle_session");
    size_t used = 0;
    PickleValue *root;
    if (pickle_run(p, data, size, &used, &root) == VFM_OK) {
        FUZZ_CHECK(used > 0 && used <= size, "consumed %zu of %zu bytes", used, size);
        int64_t budget = 1 << 16;
        walk(root, 0, &budget);
        for (int64_t i = 0; i < pickle_storage_count(p); i++)
            FUZZ_CHECK(pickle_storage_at(p, i)->kind == PK_STORAGE, "storage %lld", (long long)i);
    }
    pickle_free(p);
    fuzz_torch_readers(data, size, "fuzz.pickle");
    return 0;
}
