/* The whitelist unpickler: reads Python pickles (protocols 2-5) of torch tensors and plain state
 * dicts without ever running anything. It knows only the opcodes that build plain values (None,
 * bool, int, float, str, bytes, tuple, list, dict) and the few globals that rebuild tensors
 * (research/energon.md §7):
 *   torch._utils._rebuild_tensor / _rebuild_tensor_v2 / _rebuild_tensor_v3 / _rebuild_parameter,
 *   torch.<T>Storage for T in Float Double Half BFloat16 Long Int Short Char Byte Bool, and
 *   torch.UntypedStorage (only inside persistent ids), torch.<dtype> (for _rebuild_tensor_v3),
 *   collections.OrderedDict, torch.storage._load_from_bytes (a nested torch.save blob, handed to
 *   a hook), _codecs.encode(str, 'latin1') (how protocol 2 spells bytes).
 * Any other global (os.system, builtins.eval, subprocess.Popen, ...) is refused when it is named,
 * before anything could call it, with an error naming it; so is every opcode that builds arbitrary
 * objects (NEWOBJ, INST, OBJ, EXT*, out-of-band buffers). "Calling" a whitelisted global is a C
 * function that builds a value: a tensor description, a dict, a storage. Persistent ids
 * ('storage', <T>Storage, key, location, numel[, view]) become unresolved storages; the torch
 * container (torch_tensor.c) fills in their bytes. Every read is bounds checked: any byte string is
 * safe to hand in. */
#ifndef VFM_DATA_PICKLE_H
#define VFM_DATA_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of torch storages. */
typedef enum {
    TORCH_F32 = 0, TORCH_F64, TORCH_F16, TORCH_BF16,
    TORCH_I64, TORCH_I32, TORCH_I16, TORCH_I8, TORCH_U8, TORCH_BOOL,
    TORCH_DTYPE_COUNT
} TorchDType;

const char *torch_dtype_name(TorchDType t); /* "float32", "bfloat16", ... (torch's names) */
int torch_dtype_size(TorchDType t);          /* bytes per element */

#define TORCH_MAX_DIMS 16

typedef enum {
    PK_NONE = 0, PK_BOOL, PK_INT, PK_BIGINT, PK_FLOAT, PK_STR, PK_BYTES,
    PK_TUPLE, PK_LIST, PK_DICT,
    PK_GLOBAL,  /* a whitelisted global that was named but not called */
    PK_STORAGE, /* a torch storage (from a persistent id or a nested blob) */
    PK_TENSOR,  /* a tensor: a strided view of a storage */
} PickleKind;

typedef struct PickleValue PickleValue;

typedef struct PickleStorage {
    TorchDType dtype; /* element type (uint8 for an UntypedStorage) */
    const char *key;  /* the persistent id's key: the zip record data/<key>, or the legacy key */
    int64_t numel;    /* elements, as the persistent id says */
    int resolved;     /* 1 once data is set */
    const uint8_t *data; /* numel elements, little-endian unless big_endian */
    int big_endian;
} PickleStorage;

typedef struct PickleTensor {
    PickleValue *storage; /* a PK_STORAGE */
    TorchDType dtype;     /* the storage's dtype (_rebuild_tensor_v3: its dtype argument) */
    int64_t offset;       /* storage offset in elements */
    int ndim;
    int64_t size[TORCH_MAX_DIMS], stride[TORCH_MAX_DIMS];
} PickleTensor;

struct PickleValue {
    PickleKind kind;
    PickleValue *next_alloc; /* the session's list of everything it made */
    union {
        int64_t i;   /* PK_BOOL (0/1), PK_INT */
        double f;    /* PK_FLOAT */
        struct {     /* PK_STR (UTF-8, NUL-terminated), PK_BYTES, PK_BIGINT (two's complement, little-endian) */
            const char *ptr;
            size_t len;
        } s;
        struct {     /* PK_TUPLE, PK_LIST */
            PickleValue **items;
            int64_t n, cap;
        } seq;
        struct {     /* PK_DICT (also OrderedDict): pairs in insertion order; a repeated key keeps both, the last wins */
            PickleValue **keys, **values;
            int64_t n, cap;
        } dict;
        struct {     /* PK_GLOBAL */
            int id;
            const char *module, *name;
        } global;
        PickleStorage storage;
        PickleTensor tensor;
    } u;
};

typedef struct Pickle Pickle;

/* Hook for torch.storage._load_from_bytes(blob): loads the blob (a torch.save byte string) into the
 * same session and returns the value it holds. blob points into bytes that outlive the session. */
typedef vfm_status (*PickleLoadBytesFn)(void *ctx, Pickle *p, const uint8_t *blob, size_t len, PickleValue **out);

/* A session: options and every value made (values stay valid until pickle_free). `what` names
 * the source in errors ("shard.tar: key 000001: pickle"). load_bytes may be NULL (then
 * _load_from_bytes is refused). */
vfm_status pickle_session(Pickle **out, const char *what, PickleLoadBytesFn load_bytes, void *ctx);
void pickle_free(Pickle *p);
const char *pickle_what(const Pickle *p);
/* Names the pickle about to run in error messages ("archive/data.pkl"; NULL: none); returns the
 * previous label. label must stay valid while it is set. */
const char *pickle_set_label(Pickle *p, const char *label);

/* Runs one pickle program from bytes[0] to its STOP opcode; *root gets its value, *consumed (may be
 * NULL) the bytes read. bytes must outlive the session (bytes values point into it). Errors are
 * VFM_ERR_FORMAT naming the source, the byte offset and, for a refused global, the global. */
vfm_status pickle_run(Pickle *p, const void *bytes, size_t len, size_t *consumed, PickleValue **root);

/* Storages made in this session, in the order their persistent ids appeared. */
int64_t pickle_storage_count(const Pickle *p);
PickleValue *pickle_storage_at(const Pickle *p, int64_t i);

/* A short name of a kind ("str", "tensor", ...) for error messages. */
const char *pickle_kind_name(PickleKind k);
/* The value of a PK_STR as a C string, or NULL for another kind. */
const char *pickle_str(const PickleValue *v);

/* 1 when (module, name) is on the whitelist. */
int pickle_global_allowed(const char *module, const char *name);

#ifdef __cplusplus
}
#endif
#endif
