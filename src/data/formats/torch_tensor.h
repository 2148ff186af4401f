/* torch tensors from bytes, as torch.load(weights_only=True) reads them, without Python:
 *   - torch.save since 1.6: a zip archive (zip.h) whose `<prefix>/data.pkl` pickles the object and
 *     whose `<prefix>/data/<key>` records hold the storages (`<prefix>/byteorder` "big" swaps them);
 *   - legacy torch.save (torch < 1.6, `_use_new_zipfile_serialization=False`, and the blob inside a
 *     pickled tensor): pickles in a row (magic number, protocol 1001, system info, the object, the
 *     storage keys), then per key an int64 element count and the raw little-endian bytes;
 *   - pickle.dumps(tensor) (DFM's `.pickle` text embeddings): a plain pickle whose storage arrives
 *     through torch.storage._load_from_bytes(<legacy torch.save blob>).
 * Pickles go through the whitelist unpickler (pickle.h): a file can never run code. A tensor is
 * materialised from its storage, offset, size and strides into an owned C-order copy (non-contiguous
 * views included; every index is bounds checked against the storage).
 * Element types: float32/64, float16, bfloat16, int64/32/16/8, uint8, bool.
 *
 * For importing weights: torch_load_state_dict(path, &sd) reads a torch.save'd state dict
 * (`torch.save(model.state_dict(), path)`), returning every tensor by its dotted name in file
 * order; see TorchStateDict below. */
#ifndef VFM_DATA_TORCH_TENSOR_H
#define VFM_DATA_TORCH_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/formats/pickle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A materialised tensor: owned, contiguous, C (row-major) order, little-endian. */
typedef struct TorchTensor {
    TorchDType dtype;
    int ndim;
    int64_t shape[TORCH_MAX_DIMS];
    int64_t numel;
    void *data; /* numel * torch_dtype_size(dtype) bytes (at least 1 byte allocated) */
} TorchTensor;

/* Loads bytes (any of the three forms above) into a new session: *root is the object torch.load
 * would return, built from plain values, dicts and PK_TENSOR values whose storages all have their
 * bytes. bytes must outlive *session (pickle_free it). `what` names the source in errors. */
vfm_status torch_load_memory(const void *bytes, size_t len, const char *what, Pickle **session, PickleValue **root);

/* Copies a PK_TENSOR value (from torch_load_memory) into out. `name` names it in errors. */
vfm_status torch_tensor_from_value(const PickleValue *v, const char *name, TorchTensor *out);

/* The one tensor that bytes hold: a `.pth` part (torch.save of a tensor) or a `.pickle` part
 * (pickle.dumps of a tensor). An nn.Parameter counts as its tensor. */
vfm_status torch_tensor_decode(const void *bytes, size_t len, const char *what, TorchTensor *out);
void torch_tensor_free(TorchTensor *t);
/* dst[numel] = the values as float32: float16/bfloat16/integers up to 2^24 exactly, float64 and
 * larger integers rounded to nearest, bool 0/1. */
void torch_tensor_to_f32(const TorchTensor *t, float *dst);

/* A state dict: tensors by name, in file order. Names are the dict keys; nested dicts (and lists)
 * are flattened with dots ({"model": {"w": t}} -> "model.w", [t0, t1] -> "0", "1"), integer keys
 * written in decimal. Values that are not tensors (an epoch counter, a config string) are left
 * out and counted in n_skipped. A key repeated in one dict keeps its first position and last value. */
typedef struct TorchStateDict {
    int64_t n;
    char **names;
    TorchTensor *tensors;
    int64_t n_skipped;
} TorchStateDict;

/* Reads the file at path (mapped, not copied) and materialises every tensor. Errors name the
 * path (and the tensor or global at fault). Refuses a file whose root is not a dict. */
vfm_status torch_load_state_dict(const char *path, TorchStateDict *out);
vfm_status torch_load_state_dict_memory(const void *bytes, size_t len, const char *what, TorchStateDict *out);
/* Index of the tensor with this name, or -1. */
int64_t torch_state_dict_find(const TorchStateDict *sd, const char *name);
void torch_state_dict_free(TorchStateDict *sd);

#ifdef __cplusplus
}
#endif
#endif
