/* The whitelist unpickler (see pickle.h): a stack machine over the opcodes of protocols 2-5 that
 * build plain values, a table of the globals it accepts, and the C functions that stand in for
 * calling them. Python's semantics are followed where they matter (marks hide the stack below
 * them, MEMOIZE uses the memo's size, the last of a repeated dict key wins). */
#include "data/formats/pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 4 /* torch.save blobs inside pickles inside ... */

/* ---- dtypes ---- */

static const struct {
    const char *name;
    int size;
} dtype_info[TORCH_DTYPE_COUNT] = {
    [TORCH_F32] = {"float32", 4}, [TORCH_F64] = {"float64", 8}, [TORCH_F16] = {"float16", 2},
    [TORCH_BF16] = {"bfloat16", 2}, [TORCH_I64] = {"int64", 8},  [TORCH_I32] = {"int32", 4},
    [TORCH_I16] = {"int16", 2},    [TORCH_I8] = {"int8", 1},    [TORCH_U8] = {"uint8", 1},
    [TORCH_BOOL] = {"bool", 1},
};

const char *torch_dtype_name(TorchDType t) { return t >= 0 && t < TORCH_DTYPE_COUNT ? dtype_info[t].name : "?"; }
int torch_dtype_size(TorchDType t) { return t >= 0 && t < TORCH_DTYPE_COUNT ? dtype_info[t].size : 0; }

/* ---- the whitelist ---- */

enum {
    G_REBUILD_TENSOR, G_REBUILD_TENSOR_V2, G_REBUILD_TENSOR_V3, G_REBUILD_PARAMETER, G_LOAD_FROM_BYTES,
    G_ORDERED_DICT, G_CODECS_ENCODE, G_STORAGE, G_UNTYPED_STORAGE, G_DTYPE
};

static const struct {
    const char *module, *name;
    int id;
    TorchDType dtype; /* G_STORAGE, G_DTYPE */
} whitelist[] = {
    {"torch._utils", "_rebuild_tensor", G_REBUILD_TENSOR, 0},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR_V2, 0},
    {"torch._utils", "_rebuild_tensor_v3", G_REBUILD_TENSOR_V3, 0},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, 0},
    {"torch.storage", "_load_from_bytes", G_LOAD_FROM_BYTES, 0},
    {"collections", "OrderedDict", G_ORDERED_DICT, 0},
    {"_codecs", "encode", G_CODECS_ENCODE, 0},
    {"torch", "FloatStorage", G_STORAGE, TORCH_F32},
    {"torch", "DoubleStorage", G_STORAGE, TORCH_F64},
    {"torch", "HalfStorage", G_STORAGE, TORCH_F16},
    {"torch", "BFloat16Storage", G_STORAGE, TORCH_BF16},
    {"torch", "LongStorage", G_STORAGE, TORCH_I64},
    {"torch", "IntStorage", G_STORAGE, TORCH_I32},
    {"torch", "ShortStorage", G_STORAGE, TORCH_I16},
    {"torch", "CharStorage", G_STORAGE, TORCH_I8},
    {"torch", "ByteStorage", G_STORAGE, TORCH_U8},
    {"torch", "BoolStorage", G_STORAGE, TORCH_BOOL},
    {"torch", "UntypedStorage", G_UNTYPED_STORAGE, TORCH_U8},
    {"torch.storage", "UntypedStorage", G_UNTYPED_STORAGE, TORCH_U8},
    {"torch", "float32", G_DTYPE, TORCH_F32},
    {"torch", "float64", G_DTYPE, TORCH_F64},
    {"torch", "float16", G_DTYPE, TORCH_F16},
    {"torch", "bfloat16", G_DTYPE, TORCH_BF16},
    {"torch", "int64", G_DTYPE, TORCH_I64},
    {"torch", "int32", G_DTYPE, TORCH_I32},
    {"torch", "int16", G_DTYPE, TORCH_I16},
    {"torch", "int8", G_DTYPE, TORCH_I8},
    {"torch", "uint8", G_DTYPE, TORCH_U8},
    {"torch", "bool", G_DTYPE, TORCH_BOOL},
};
#define N_WHITELIST ((int)(sizeof whitelist / sizeof whitelist[0]))

static int whitelist_find(const char *module, size_t mlen, const char *name, size_t nlen) {
    for (int i = 0; i < N_WHITELIST; i++)
        if (strlen(whitelist[i].module) == mlen && memcmp(whitelist[i].module, module, mlen) == 0 &&
            strlen(whitelist[i].name) == nlen && memcmp(whitelist[i].name, name, nlen) == 0)
            return i;
    return -1;
}

int pickle_global_allowed(const char *module, const char *name) {
    return whitelist_find(module, strlen(module), name, strlen(name)) >= 0;
}

/* ---- the session and its values ---- */

struct Pickle {
    char what[512];
    const char *label; /* which pickle of the file runs ("archive/data.pkl"), for messages; may be NULL */
    PickleLoadBytesFn load_bytes;
    void *ctx;
    PickleValue *allocs;
    PickleValue **storages;
    int64_t n_storages, cap_storages;
    int depth;
};

vfm_status pickle_session(Pickle **out, const char *what, PickleLoadBytesFn load_bytes, void *ctx) {
    *out = calloc(1, sizeof **out);
    if (!*out) return vfm_fail(VFM_ERR_NOMEM, "pickle: out of memory");
    snprintf((*out)->what, sizeof (*out)->what, "%s", what ? what : "pickle");
    (*out)->load_bytes = load_bytes;
    (*out)->ctx = ctx;
    return VFM_OK;
}

void pickle_free(Pickle *p) {
    if (!p) return;
    for (PickleValue *v = p->allocs, *next; v; v = next) {
        next = v->next_alloc;
        if (v->kind == PK_TUPLE || v->kind == PK_LIST) free(v->u.seq.items);
        if (v->kind == PK_DICT) free(v->u.dict.keys), free(v->u.dict.values);
        free(v);
    }
    free(p->storages);
    free(p);
}

const char *pickle_what(const Pickle *p) { return p->what; }

const char *pickle_set_label(Pickle *p, const char *label) {
    const char *old = p->label;
    p->label = label;
    return old;
}
int64_t pickle_storage_count(const Pickle *p) { return p->n_storages; }
PickleValue *pickle_storage_at(const Pickle *p, int64_t i) { return i >= 0 && i < p->n_storages ? p->storages[i] : NULL; }

const char *pickle_kind_name(PickleKind k) {
    static const char *names[] = {"None", "bool", "int", "int", "float", "str", "bytes", "tuple", "list",
                                  "dict", "global", "storage", "tensor"};
    return k >= 0 && k <= PK_TENSOR ? names[k] : "?";
}

const char *pickle_str(const PickleValue *v) { return v && v->kind == PK_STR ? v->u.s.ptr : NULL; }

/* A value with `extra` bytes after it (for a string's characters). */
static PickleValue *new_value(Pickle *p, PickleKind kind, size_t extra) {
    PickleValue *v = calloc(1, sizeof *v + extra);
    if (!v) return NULL;
    v->kind = kind;
    v->next_alloc = p->allocs;
    p->allocs = v;
    return v;
}

static PickleValue *new_string(Pickle *p, PickleKind kind, const void *bytes, size_t len) {
    if (len > SIZE_MAX - sizeof(PickleValue) - 1) return NULL;
    PickleValue *v = new_value(p, kind, len + 1);
    if (!v) return NULL;
    char *chars = (char *)(v + 1);
    memcpy(chars, bytes, len);
    chars[len] = 0;
    v->u.s.ptr = chars;
    v->u.s.len = len;
    return v;
}

static int seq_push(PickleValue *v, PickleValue *item) {
    if (v->u.seq.n == v->u.seq.cap) {
        int64_t cap = v->u.seq.cap ? 2 * v->u.seq.cap : 4;
        PickleValue **items = realloc(v->u.seq.items, (size_t)cap * sizeof *items);
        if (!items) return 0;
        v->u.seq.items = items;
        v->u.seq.cap = cap;
    }
    v->u.seq.items[v->u.seq.n++] = item;
    return 1;
}

static int dict_set(PickleValue *d, PickleValue *key, PickleValue *value) {
    if (d->u.dict.n == d->u.dict.cap) {
        int64_t cap = d->u.dict.cap ? 2 * d->u.dict.cap : 4;
        PickleValue **k = realloc(d->u.dict.keys, (size_t)cap * sizeof *k);
        if (!k) return 0;
        d->u.dict.keys = k;
        PickleValue **v = realloc(d->u.dict.values, (size_t)cap * sizeof *v);
        if (!v) return 0;
        d->u.dict.values = v;
        d->u.dict.cap = cap;
    }
    d->u.dict.keys[d->u.dict.n] = key;
    d->u.dict.values[d->u.dict.n++] = value;
    return 1;
}

/* ---- the machine ---- */

typedef struct {
    Pickle *p;
    const uint8_t *b;
    size_t len, pos, op_at; /* op_at: offset of the opcode being run */
    PickleValue **stack;
    int64_t sp, cap;
    int64_t *marks; /* stack heights at each MARK */
    int64_t n_marks, cap_marks;
    PickleValue **memo;
    int64_t memo_cap, memo_used;
    int proto; /* from PROTO; 0 without one */
    uint64_t work_left; /* copies a call may make of values it can reach through the memo again and again */
} Vm;

static vfm_status fail(Vm *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static vfm_status fail(Vm *vm, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vfm_fail(VFM_ERR_FORMAT, "%s%s%s: pickle: byte %zu: %s", vm->p->what, vm->p->label ? ": " : "",
                    vm->p->label ? vm->p->label : "", vm->op_at, msg);
}

static vfm_status nomem(Vm *vm) { return vfm_fail(VFM_ERR_NOMEM, "%s: pickle: out of memory", vm->p->what); }

/* A printable copy of a global's name part, for messages. */
static void printable(char *out, size_t n, const char *s, size_t len) {
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < n; i++) out[k++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    out[k] = 0;
}

/* Calls that copy an argument (OrderedDict(pairs), _codecs.encode, _load_from_bytes) could be
 * repeated on one memoized value: their work is bounded by a budget linear in the pickle's size. */
static vfm_status charge(Vm *vm, uint64_t n) {
    if (n > vm->work_left) return fail(vm, "the pickle repeats work far beyond its size: refused");
    vm->work_left -= n;
    return VFM_OK;
}

static vfm_status need(Vm *vm, size_t n) {
    if (n > vm->len - vm->pos) return fail(vm, "truncated (%zu more bytes needed, %zu left)", n, vm->len - vm->pos);
    return VFM_OK;
}

static uint64_t read_le(Vm *vm, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)vm->b[vm->pos + (size_t)i] << (8 * i);
    vm->pos += (size_t)n;
    return v;
}

static vfm_status push(Vm *vm, PickleValue *v) {
    if (!v) return nomem(vm);
    if (vm->sp == vm->cap) {
        int64_t cap = vm->cap ? 2 * vm->cap : 64;
        PickleValue **s = realloc(vm->stack, (size_t)cap * sizeof *s);
        if (!s) return nomem(vm);
        vm->stack = s;
        vm->cap = cap;
    }
    vm->stack[vm->sp++] = v;
    return VFM_OK;
}

static int64_t floor_of(const Vm *vm) { return vm->n_marks ? vm->marks[vm->n_marks - 1] : 0; }

static vfm_status pop(Vm *vm, PickleValue **out) {
    if (vm->sp <= floor_of(vm)) return fail(vm, "stack underflow");
    *out = vm->stack[--vm->sp];
    return VFM_OK;
}

static vfm_status top(Vm *vm, PickleValue **out) {
    if (vm->sp <= floor_of(vm)) return fail(vm, "stack underflow");
    *out = vm->stack[vm->sp - 1];
    return VFM_OK;
}

/* Removes the topmost mark: items [*first, sp) are those pushed since. */
static vfm_status pop_mark(Vm *vm, int64_t *first) {
    if (!vm->n_marks) return fail(vm, "no MARK on the stack");
    *first = vm->marks[--vm->n_marks];
    return VFM_OK;
}

static vfm_status memo_put(Vm *vm, uint64_t idx) {
    PickleValue *v;
    VFM_TRY(top(vm, &v));
    /* a real pickle's memo never has more entries than the pickle has bytes */
    if (idx >= vm->len) return fail(vm, "memo index %llu out of range", (unsigned long long)idx);
    if ((int64_t)idx >= vm->memo_cap) {
        int64_t cap = vm->memo_cap ? vm->memo_cap : 64;
        while (cap <= (int64_t)idx) cap *= 2;
        PickleValue **m = realloc(vm->memo, (size_t)cap * sizeof *m);
        if (!m) return nomem(vm);
        memset(m + vm->memo_cap, 0, (size_t)(cap - vm->memo_cap) * sizeof *m);
        vm->memo = m;
        vm->memo_cap = cap;
    }
    if (!vm->memo[idx]) vm->memo_used++;
    vm->memo[idx] = v;
    return VFM_OK;
}

static vfm_status memo_get(Vm *vm, uint64_t idx) {
    if ((int64_t)idx >= vm->memo_cap || idx >= vm->len || !vm->memo[idx])
        return fail(vm, "memo index %llu was never set", (unsigned long long)idx);
    return push(vm, vm->memo[idx]);
}

static vfm_status push_int(Vm *vm, int64_t i) {
    PickleValue *v = new_value(vm->p, PK_INT, 0);
    if (v) v->u.i = i;
    return push(vm, v);
}

/* LONG1 / LONG4: n bytes of two's complement, little-endian. */
static vfm_status push_long(Vm *vm, size_t n) {
    VFM_TRY(need(vm, n));
    const uint8_t *p = vm->b + vm->pos;
    vm->pos += n;
    if (n > 8) return push(vm, new_string(vm->p, PK_BIGINT, p, n));
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++) u |= (uint64_t)p[i] << (8 * i);
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    int64_t i;
    memcpy(&i, &u, 8);
    return push_int(vm, i);
}

static vfm_status push_sized(Vm *vm, PickleKind kind, uint64_t n) {
    if (n > vm->len - vm->pos) return fail(vm, "truncated: a %s of %llu bytes, %zu left", pickle_kind_name(kind),
                                           (unsigned long long)n, vm->len - vm->pos);
    const uint8_t *p = vm->b + vm->pos;
    vm->pos += (size_t)n;
    if (kind == PK_STR) return push(vm, new_string(vm->p, PK_STR, p, (size_t)n));
    PickleValue *v = new_value(vm->p, PK_BYTES, 0); /* bytes: a view into the pickle */
    if (v) v->u.s.ptr = (const char *)p, v->u.s.len = (size_t)n;
    return push(vm, v);
}

static vfm_status push_global(Vm *vm, const char *module, size_t mlen, const char *name, size_t nlen) {
    int g = whitelist_find(module, mlen, name, nlen);
    if (g < 0) {
        char m[128], n[128];
        printable(m, sizeof m, module, mlen);
        printable(n, sizeof n, name, nlen);
        size_t nl = strlen(n);
        if (strcmp(m, "torch") == 0 && nl > 7 && strcmp(n + nl - 7, "Storage") == 0)
            return fail(vm, "storage type 'torch.%s' is not read (float32/64, float16, bfloat16, int8/16/32/64, uint8 "
                        "and bool are)", n);
        /* a security event, not a malformed file: its own status, so readers put it first */
        return vfm_fail(VFM_ERR_REFUSED, "%s%s%s: pickle: byte %zu: global '%s.%s' is not allowed: the unpickler "
                        "rebuilds tensors and state dicts only, and never runs anything a pickle names", vm->p->what,
                        vm->p->label ? ": " : "", vm->p->label ? vm->p->label : "", vm->op_at, m, n);
    }
    PickleValue *v = new_value(vm->p, PK_GLOBAL, 0);
    if (v) v->u.global.id = g, v->u.global.module = whitelist[g].module, v->u.global.name = whitelist[g].name;
    return push(vm, v);
}

/* GLOBAL: "module\nname\n". Below protocol 3 Python writes Python 2's module names and reads them
 * back under their Python 3 names (pickle's fix_imports); the ones a malicious pickle would use: */
static const char *const py2_modules[][2] = {
    {"__builtin__", "builtins"}, {"commands", "subprocess"}, {"copy_reg", "copyreg"}, {"exceptions", "builtins"},
    {"cPickle", "pickle"},       {"UserDict", "collections"},
};

static vfm_status op_global(Vm *vm) {
    const char *lines[2];
    size_t lens[2];
    for (int k = 0; k < 2; k++) {
        const uint8_t *start = vm->b + vm->pos, *nl = memchr(start, '\n', vm->len - vm->pos);
        if (!nl) return fail(vm, "GLOBAL without a newline");
        lines[k] = (const char *)start;
        lens[k] = (size_t)(nl - start);
        vm->pos += lens[k] + 1;
    }
    for (size_t i = 0; vm->proto < 3 && i < sizeof py2_modules / sizeof py2_modules[0]; i++)
        if (strlen(py2_modules[i][0]) == lens[0] && memcmp(py2_modules[i][0], lines[0], lens[0]) == 0) {
            lines[0] = py2_modules[i][1];
            lens[0] = strlen(lines[0]);
            break;
        }
    return push_global(vm, lines[0], lens[0], lines[1], lens[1]);
}

static vfm_status op_stack_global(Vm *vm) {
    PickleValue *name = NULL, *module = NULL;
    VFM_TRY(pop(vm, &name));
    VFM_TRY(pop(vm, &module));
    if (name->kind != PK_STR || module->kind != PK_STR) return fail(vm, "STACK_GLOBAL needs two strings");
    return push_global(vm, module->u.s.ptr, module->u.s.len, name->u.s.ptr, name->u.s.len);
}

/* Items pushed since the last MARK become a tuple or list. */
static vfm_status op_collect(Vm *vm, PickleKind kind) {
    int64_t first = 0;
    VFM_TRY(pop_mark(vm, &first));
    PickleValue *v = new_value(vm->p, kind, 0);
    if (!v) return nomem(vm);
    for (int64_t i = first; i < vm->sp; i++)
        if (!seq_push(v, vm->stack[i])) return nomem(vm);
    vm->sp = first;
    return push(vm, v);
}

static vfm_status op_tuple_n(Vm *vm, int n) {
    if (vm->sp - floor_of(vm) < n) return fail(vm, "stack underflow");
    PickleValue *v = new_value(vm->p, PK_TUPLE, 0);
    if (!v) return nomem(vm);
    for (int64_t i = vm->sp - n; i < vm->sp; i++)
        if (!seq_push(v, vm->stack[i])) return nomem(vm);
    vm->sp -= n;
    return push(vm, v);
}

/* APPENDS / SETITEMS / DICT: the items since the last mark go into the object below it (or a new dict). */
static vfm_status op_fill(Vm *vm, int op) {
    int64_t first = 0;
    VFM_TRY(pop_mark(vm, &first));
    PickleValue *target;
    if (op == 'd') {
        target = new_value(vm->p, PK_DICT, 0);
        if (!target) return nomem(vm);
    } else {
        if (first <= floor_of(vm)) return fail(vm, "stack underflow");
        target = vm->stack[first - 1];
    }
    if (op == 'e') {
        if (target->kind != PK_LIST) return fail(vm, "APPENDS to a %s", pickle_kind_name(target->kind));
        for (int64_t i = first; i < vm->sp; i++)
            if (!seq_push(target, vm->stack[i])) return nomem(vm);
    } else {
        if (target->kind != PK_DICT) return fail(vm, "SETITEMS on a %s", pickle_kind_name(target->kind));
        if ((vm->sp - first) % 2) return fail(vm, "odd number of items for a dict");
        for (int64_t i = first; i < vm->sp; i += 2)
            if (!dict_set(target, vm->stack[i], vm->stack[i + 1])) return nomem(vm);
    }
    vm->sp = first;
    return op == 'd' ? push(vm, target) : VFM_OK;
}

/* ---- calls of whitelisted globals ---- */

static int is_int(const PickleValue *v) { return v->kind == PK_INT || v->kind == PK_BOOL; }

/* A size or stride tuple: non-negative integers. */
static vfm_status int_tuple(Vm *vm, const PickleValue *v, const char *what, int64_t *out, int *n) {
    if (v->kind != PK_TUPLE && v->kind != PK_LIST) return fail(vm, "tensor %s is a %s, not a tuple", what, pickle_kind_name(v->kind));
    if (v->u.seq.n > TORCH_MAX_DIMS) return fail(vm, "tensor has %lld dimensions (at most %d)", (long long)v->u.seq.n, TORCH_MAX_DIMS);
    for (int64_t i = 0; i < v->u.seq.n; i++) {
        const PickleValue *e = v->u.seq.items[i];
        if (e->kind != PK_INT || e->u.i < 0) return fail(vm, "tensor %s[%lld] is not a non-negative integer", what, (long long)i);
        out[i] = e->u.i;
    }
    *n = (int)v->u.seq.n;
    return VFM_OK;
}

/* _rebuild_tensor[_v2|_v3](storage, offset, size, stride, [requires_grad, hooks, [dtype,]] [metadata]) */
static vfm_status call_rebuild(Vm *vm, int id, PickleValue **a, int64_t n) {
    int64_t lo = id == G_REBUILD_TENSOR ? 4 : id == G_REBUILD_TENSOR_V2 ? 6 : 7;
    if (n < lo || n > (id == G_REBUILD_TENSOR ? 4 : lo + 1))
        return fail(vm, "%s with %lld arguments", whitelist[id].name, (long long)n);
    if (a[0]->kind != PK_STORAGE) return fail(vm, "%s: the storage argument is a %s", whitelist[id].name, pickle_kind_name(a[0]->kind));
    if (a[1]->kind != PK_INT || a[1]->u.i < 0) return fail(vm, "%s: bad storage offset", whitelist[id].name);
    PickleValue *t = new_value(vm->p, PK_TENSOR, 0);
    if (!t) return nomem(vm);
    PickleTensor *pt = &t->u.tensor;
    pt->storage = a[0];
    pt->dtype = a[0]->u.storage.dtype;
    pt->offset = a[1]->u.i;
    int nd_size, nd_stride;
    VFM_TRY(int_tuple(vm, a[2], "size", pt->size, &nd_size));
    VFM_TRY(int_tuple(vm, a[3], "stride", pt->stride, &nd_stride));
    if (nd_size != nd_stride) return fail(vm, "tensor size has %d dimensions, its stride %d", nd_size, nd_stride);
    pt->ndim = nd_size;
    if (n > 4) {
        if (!is_int(a[4])) return fail(vm, "%s: requires_grad is a %s", whitelist[id].name, pickle_kind_name(a[4]->kind));
        if (a[5]->kind != PK_DICT && a[5]->kind != PK_NONE)
            return fail(vm, "%s: backward hooks are a %s", whitelist[id].name, pickle_kind_name(a[5]->kind));
        if (a[5]->kind == PK_DICT && a[5]->u.dict.n)
            return fail(vm, "%s: a tensor with backward hooks", whitelist[id].name);
    }
    if (id == G_REBUILD_TENSOR_V3) {
        if (a[6]->kind != PK_GLOBAL || whitelist[a[6]->u.global.id].id != G_DTYPE)
            return fail(vm, "_rebuild_tensor_v3: the dtype argument is a %s", pickle_kind_name(a[6]->kind));
        pt->dtype = whitelist[a[6]->u.global.id].dtype;
    }
    if (n == lo + 1 && a[lo]->kind != PK_DICT) return fail(vm, "%s: metadata is a %s", whitelist[id].name, pickle_kind_name(a[lo]->kind));
    return push(vm, t);
}

/* _codecs.encode(str, 'latin1'): code points below 256 from UTF-8. */
static vfm_status call_encode(Vm *vm, PickleValue **a, int64_t n) {
    if (n != 2 || a[0]->kind != PK_STR || a[1]->kind != PK_STR ||
        (strcmp(a[1]->u.s.ptr, "latin1") != 0 && strcmp(a[1]->u.s.ptr, "latin-1") != 0))
        return fail(vm, "_codecs.encode is allowed only as encode(str, 'latin1')");
    const uint8_t *s = (const uint8_t *)a[0]->u.s.ptr;
    size_t len = a[0]->u.s.len, k = 0;
    VFM_TRY(charge(vm, len));
    PickleValue *v = new_value(vm->p, PK_BYTES, len);
    if (!v) return nomem(vm);
    uint8_t *out = (uint8_t *)(v + 1);
    for (size_t i = 0; i < len; k++) {
        if (s[i] < 0x80) {
            out[k] = s[i++];
        } else if ((s[i] & 0xe0) == 0xc0 && i + 1 < len && (s[i + 1] & 0xc0) == 0x80 && s[i] <= 0xc3 && s[i] >= 0xc2) {
            out[k] = (uint8_t)((s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f));
            i += 2;
        } else {
            return fail(vm, "_codecs.encode: the string is not latin-1");
        }
    }
    v->u.s.ptr = (const char *)out;
    v->u.s.len = k;
    return push(vm, v);
}

static vfm_status call_ordered_dict(Vm *vm, PickleValue **a, int64_t n) {
    PickleValue *d = new_value(vm->p, PK_DICT, 0);
    if (!d) return nomem(vm);
    if (n == 1 && a[0]->kind == PK_DICT) VFM_TRY(charge(vm, (uint64_t)a[0]->u.dict.n));
    if (n == 1 && (a[0]->kind == PK_LIST || a[0]->kind == PK_TUPLE)) VFM_TRY(charge(vm, (uint64_t)a[0]->u.seq.n));
    if (n == 1 && (a[0]->kind == PK_LIST || a[0]->kind == PK_TUPLE)) {
        for (int64_t i = 0; i < a[0]->u.seq.n; i++) {
            const PickleValue *pair = a[0]->u.seq.items[i];
            if ((pair->kind != PK_TUPLE && pair->kind != PK_LIST) || pair->u.seq.n != 2)
                return fail(vm, "OrderedDict from a sequence that is not of pairs");
            if (!dict_set(d, pair->u.seq.items[0], pair->u.seq.items[1])) return nomem(vm);
        }
    } else if (n == 1 && a[0]->kind == PK_DICT) {
        for (int64_t i = 0; i < a[0]->u.dict.n; i++)
            if (!dict_set(d, a[0]->u.dict.keys[i], a[0]->u.dict.values[i])) return nomem(vm);
    } else if (n != 0) {
        return fail(vm, "OrderedDict with unexpected arguments");
    }
    return push(vm, d);
}

static vfm_status op_reduce(Vm *vm) {
    PickleValue *args = NULL, *fn = NULL;
    VFM_TRY(pop(vm, &args));
    VFM_TRY(pop(vm, &fn));
    if (fn->kind != PK_GLOBAL) return fail(vm, "REDUCE calls a %s, not an allowed global", pickle_kind_name(fn->kind));
    if (args->kind != PK_TUPLE) return fail(vm, "REDUCE with %s arguments", pickle_kind_name(args->kind));
    PickleValue **a = args->u.seq.items;
    int64_t n = args->u.seq.n;
    int id = whitelist[fn->u.global.id].id;
    switch (id) {
    case G_REBUILD_TENSOR:
    case G_REBUILD_TENSOR_V2:
    case G_REBUILD_TENSOR_V3: return call_rebuild(vm, id, a, n);
    case G_REBUILD_PARAMETER:
        if (n != 3 || a[0]->kind != PK_TENSOR) return fail(vm, "_rebuild_parameter needs (tensor, requires_grad, hooks)");
        return push(vm, a[0]);
    case G_ORDERED_DICT: return call_ordered_dict(vm, a, n);
    case G_CODECS_ENCODE: return call_encode(vm, a, n);
    case G_LOAD_FROM_BYTES: {
        if (n != 1 || a[0]->kind != PK_BYTES) return fail(vm, "_load_from_bytes needs one bytes argument");
        if (!vm->p->load_bytes) return fail(vm, "_load_from_bytes is not allowed here");
        VFM_TRY(charge(vm, a[0]->u.s.len));
        PickleValue *v = NULL;
        VFM_TRY(vm->p->load_bytes(vm->p->ctx, vm->p, (const uint8_t *)a[0]->u.s.ptr, a[0]->u.s.len, &v));
        return push(vm, v);
    }
    default:
        return fail(vm, "'%s.%s' may appear in a persistent id but is never called", fn->u.global.module,
                    fn->u.global.name);
    }
}

/* BINPERSID: ('storage', <T>Storage, key, location, numel[, view_metadata]) */
static vfm_status op_persid(Vm *vm) {
    PickleValue *pid = NULL;
    VFM_TRY(pop(vm, &pid));
    PickleValue **a = pid->kind == PK_TUPLE ? pid->u.seq.items : NULL;
    int64_t n = a ? pid->u.seq.n : 0;
    if (n < 5 || n > 6 || !pickle_str(a[0]) || strcmp(a[0]->u.s.ptr, "storage") != 0)
        return fail(vm, "persistent id is not ('storage', type, key, location, numel)");
    if (a[1]->kind != PK_GLOBAL ||
        (whitelist[a[1]->u.global.id].id != G_STORAGE && whitelist[a[1]->u.global.id].id != G_UNTYPED_STORAGE))
        return fail(vm, "persistent id: the storage type is a %s, not a torch storage class", pickle_kind_name(a[1]->kind));
    if (a[2]->kind != PK_STR) return fail(vm, "persistent id: the key is a %s", pickle_kind_name(a[2]->kind));
    if (a[4]->kind != PK_INT || a[4]->u.i < 0) return fail(vm, "persistent id: bad element count");
    if (n == 6 && a[5]->kind != PK_NONE) return fail(vm, "storage views (torch < 0.4 files) are not supported");
    PickleValue *s = new_value(vm->p, PK_STORAGE, 0);
    if (!s) return nomem(vm);
    s->u.storage.dtype = whitelist[a[1]->u.global.id].dtype;
    s->u.storage.key = a[2]->u.s.ptr;
    s->u.storage.numel = a[4]->u.i;
    Pickle *p = vm->p;
    if (p->n_storages == p->cap_storages) {
        int64_t cap = p->cap_storages ? 2 * p->cap_storages : 16;
        PickleValue **l = realloc(p->storages, (size_t)cap * sizeof *l);
        if (!l) return nomem(vm);
        p->storages = l;
        p->cap_storages = cap;
    }
    p->storages[p->n_storages++] = s;
    return push(vm, s);
}

/* BUILD: only a dict's attribute state (a state dict's _metadata), which is dropped. */
static vfm_status op_build(Vm *vm) {
    PickleValue *state = NULL, *obj = NULL;
    VFM_TRY(pop(vm, &state));
    VFM_TRY(top(vm, &obj));
    if (obj->kind != PK_DICT || (state->kind != PK_DICT && state->kind != PK_NONE))
        return fail(vm, "BUILD sets state on a %s: only a dict's attributes are accepted", pickle_kind_name(obj->kind));
    return VFM_OK;
}

/* NEWOBJ: only OrderedDict.__new__(OrderedDict) */
static vfm_status op_newobj(Vm *vm) {
    PickleValue *args = NULL, *cls = NULL;
    VFM_TRY(pop(vm, &args));
    VFM_TRY(pop(vm, &cls));
    if (cls->kind != PK_GLOBAL || whitelist[cls->u.global.id].id != G_ORDERED_DICT || args->kind != PK_TUPLE ||
        args->u.seq.n != 0)
        return fail(vm, "NEWOBJ builds an object of a %s: only an empty OrderedDict is accepted", pickle_kind_name(cls->kind));
    return push(vm, new_value(vm->p, PK_DICT, 0));
}

static vfm_status step(Vm *vm, int *stop) {
    vm->op_at = vm->pos;
    VFM_TRY(need(vm, 1));
    uint8_t op = vm->b[vm->pos++];
    PickleValue *v = NULL, *w = NULL;
    switch (op) {
    case 0x80: /* PROTO */
        VFM_TRY(need(vm, 1));
        if (vm->b[vm->pos] < 2 || vm->b[vm->pos] > 5) return fail(vm, "pickle protocol %d (2 to 5 are read)", vm->b[vm->pos]);
        vm->proto = vm->b[vm->pos++];
        return VFM_OK;
    case 0x95: /* FRAME: a length hint */
        VFM_TRY(need(vm, 8));
        if (read_le(vm, 8) > vm->len - vm->pos) return fail(vm, "FRAME runs past the end");
        return VFM_OK;
    case '.': *stop = 1; return VFM_OK;
    case '(':
        if (vm->n_marks == vm->cap_marks) {
            int64_t cap = vm->cap_marks ? 2 * vm->cap_marks : 16;
            int64_t *m = realloc(vm->marks, (size_t)cap * sizeof *m);
            if (!m) return nomem(vm);
            vm->marks = m;
            vm->cap_marks = cap;
        }
        vm->marks[vm->n_marks++] = vm->sp;
        return VFM_OK;
    case '0': return pop(vm, &v);
    case '1': {
        int64_t first = 0;
        VFM_TRY(pop_mark(vm, &first));
        vm->sp = first;
        return VFM_OK;
    }
    case '2': VFM_TRY(top(vm, &v)); return push(vm, v);
    case 'N': return push(vm, new_value(vm->p, PK_NONE, 0));
    case 0x88:
    case 0x89:
        v = new_value(vm->p, PK_BOOL, 0);
        if (v) v->u.i = op == 0x88;
        return push(vm, v);
    case 'J': VFM_TRY(need(vm, 4)); return push_int(vm, (int32_t)(uint32_t)read_le(vm, 4));
    case 'K': VFM_TRY(need(vm, 1)); return push_int(vm, (int64_t)read_le(vm, 1));
    case 'M': VFM_TRY(need(vm, 2)); return push_int(vm, (int64_t)read_le(vm, 2));
    case 0x8a: VFM_TRY(need(vm, 1)); return push_long(vm, (size_t)read_le(vm, 1));
    case 0x8b: {
        VFM_TRY(need(vm, 4));
        int32_t n = (int32_t)(uint32_t)read_le(vm, 4);
        if (n < 0) return fail(vm, "LONG4 with a negative length");
        return push_long(vm, (size_t)n);
    }
    case 'G': {
        VFM_TRY(need(vm, 8));
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = u << 8 | vm->b[vm->pos + (size_t)i];
        vm->pos += 8;
        v = new_value(vm->p, PK_FLOAT, 0);
        if (v) memcpy(&v->u.f, &u, 8);
        return push(vm, v);
    }
    case 'X': VFM_TRY(need(vm, 4)); return push_sized(vm, PK_STR, read_le(vm, 4));
    case 0x8c: VFM_TRY(need(vm, 1)); return push_sized(vm, PK_STR, read_le(vm, 1));
    case 0x8d: VFM_TRY(need(vm, 8)); return push_sized(vm, PK_STR, read_le(vm, 8));
    case 'T': VFM_TRY(need(vm, 4)); return push_sized(vm, PK_STR, (uint32_t)read_le(vm, 4)); /* Python 2 str */
    case 'U': VFM_TRY(need(vm, 1)); return push_sized(vm, PK_STR, read_le(vm, 1));
    case 'B': VFM_TRY(need(vm, 4)); return push_sized(vm, PK_BYTES, read_le(vm, 4));
    case 'C': VFM_TRY(need(vm, 1)); return push_sized(vm, PK_BYTES, read_le(vm, 1));
    case 0x8e:
    case 0x96: VFM_TRY(need(vm, 8)); return push_sized(vm, PK_BYTES, read_le(vm, 8));
    case ')': return push(vm, new_value(vm->p, PK_TUPLE, 0));
    case 't': return op_collect(vm, PK_TUPLE);
    case 0x85: return op_tuple_n(vm, 1);
    case 0x86: return op_tuple_n(vm, 2);
    case 0x87: return op_tuple_n(vm, 3);
    case ']': return push(vm, new_value(vm->p, PK_LIST, 0));
    case 'l': return op_collect(vm, PK_LIST);
    case 'a':
        VFM_TRY(pop(vm, &v));
        VFM_TRY(top(vm, &w));
        if (w->kind != PK_LIST) return fail(vm, "APPEND to a %s", pickle_kind_name(w->kind));
        return seq_push(w, v) ? VFM_OK : nomem(vm);
    case 'e': return op_fill(vm, 'e');
    case '}': return push(vm, new_value(vm->p, PK_DICT, 0));
    case 'd': return op_fill(vm, 'd');
    case 'u': return op_fill(vm, 'u');
    case 's': {
        PickleValue *key = NULL, *d = NULL;
        VFM_TRY(pop(vm, &v));
        VFM_TRY(pop(vm, &key));
        VFM_TRY(top(vm, &d));
        if (d->kind != PK_DICT) return fail(vm, "SETITEM on a %s", pickle_kind_name(d->kind));
        return dict_set(d, key, v) ? VFM_OK : nomem(vm);
    }
    case 'c': return op_global(vm);
    case 0x93: return op_stack_global(vm);
    case 'R': return op_reduce(vm);
    case 'b': return op_build(vm);
    case 0x81: return op_newobj(vm);
    case 'Q': return op_persid(vm);
    case 'q': VFM_TRY(need(vm, 1)); return memo_put(vm, read_le(vm, 1));
    case 'r': VFM_TRY(need(vm, 4)); return memo_put(vm, read_le(vm, 4));
    case 0x94: return memo_put(vm, (uint64_t)vm->memo_used);
    case 'h': VFM_TRY(need(vm, 1)); return memo_get(vm, read_le(vm, 1));
    case 'j': VFM_TRY(need(vm, 4)); return memo_get(vm, read_le(vm, 4));
    case 'i': case 'o': case 0x92:
        return fail(vm, "opcode 0x%02x builds an arbitrary object: refused", op);
    case 0x82: case 0x83: case 0x84:
        return fail(vm, "extension-registry opcode 0x%02x: refused", op);
    case 0x97: case 0x98:
        return fail(vm, "out-of-band buffers (opcode 0x%02x) are not supported", op);
    case 'P':
        return fail(vm, "text persistent ids (protocol 0) are not supported");
    default:
        return fail(vm, "opcode 0x%02x is not read (protocols 2 to 5 as Python writes them; no text opcodes)", op);
    }
}

vfm_status pickle_run(Pickle *p, const void *bytes, size_t len, size_t *consumed, PickleValue **root) {
    *root = NULL;
    if (p->depth >= MAX_NESTING)
        return vfm_fail(VFM_ERR_FORMAT, "%s: pickle: torch.save blobs nested more than %d deep", p->what, MAX_NESTING);
    Vm vm = {.p = p, .b = bytes, .len = len, .work_left = 16 * (uint64_t)len + (1u << 20)};
    p->depth++;
    vfm_status s = VFM_OK;
    int stop = 0;
    while (s == VFM_OK && !stop) s = step(&vm, &stop);
    p->depth--;
    if (s == VFM_OK) {
        vm.op_at = vm.pos - 1;
        s = pop(&vm, root);
    }
    if (s == VFM_OK && consumed) *consumed = vm.pos;
    free(vm.stack);
    free(vm.marks);
    free(vm.memo);
    return s;
}
