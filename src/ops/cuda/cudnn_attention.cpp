// The one C++ file of vfm: cuDNN's fused scaled-dot-product attention over packed THD sequences
// through the header-only cudnn-frontend (PyPI nvidia-cudnn-frontend, pinned in the Makefile), behind
// the C API of cudnn_attention.h.
//
// Layout (research/cudnn-attention.md): Q, O, dO, dQ are [B, H, S, hd] with strides
// [S·H·hd, hd, H·hd, 1] (token-major) and K, V, dK, dV the same with Hkv; the batch stride is
// replaced by ragged offsets (elements) so sample b starts at its padded row. Stats (the natural-log
// LSE of the scaled scores) is f32 [B, H, S, 1] with strides [S·H, 1, H, 1], ragged too: exactly
// the op's lse[rows, H]. The padding mask with per-sample lengths keeps cuDNN inside each sample's
// real rows. The backward is cuDNN's deterministic algorithm.
//
// cuDNN itself is loaded at run time (cuda_libs.h): the frontend is compiled without its own
// dynamic loading (which would bring a second, shared CUDA runtime into the process) and the dozen
// cuDNN and NVRTC entry points it calls are defined below as forwarders to the loaded libraries.
#include <cudnn_frontend.h>
#include <nvrtc.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_libs.h"
#include "cudnn_attention.h"

namespace fe = cudnn_frontend;

// ---- forwarders to the run-time loaded libraries ------------------------------------------------

#define VFM_FORWARD(lib, ret, fail, name, params, args)                                   \
    extern "C" ret name params {                                                          \
        static auto fn = reinterpret_cast<decltype(&name)>(cuda_lib_symbol(lib, #name));  \
        if (!fn) return fail;                                                             \
        return fn args;                                                                   \
    }

VFM_FORWARD(CUDA_LIB_CUDNN, size_t, 0, cudnnGetVersion, (void), ())
VFM_FORWARD(CUDA_LIB_CUDNN, const char *, "cuDNN is not loaded", cudnnGetErrorString, (cudnnStatus_t s), (s))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnCreate, (cudnnHandle_t * h), (h))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnDestroy, (cudnnHandle_t h), (h))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnSetStream,
            (cudnnHandle_t h, cudaStream_t s), (h, s))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnGetStream,
            (cudnnHandle_t h, cudaStream_t *s), (h, s))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendCreateDescriptor,
            (cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d), (t, d))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendDestroyDescriptor,
            (cudnnBackendDescriptor_t d), (d))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendInitialize,
            (cudnnBackendDescriptor_t d), (d))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendFinalize,
            (cudnnBackendDescriptor_t d), (d))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendSetAttribute,
            (cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t c,
             const void *e),
            (d, n, t, c, e))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendGetAttribute,
            (cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t,
             int64_t r, int64_t *c, void *e),
            (d, n, t, r, c, e))
VFM_FORWARD(CUDA_LIB_CUDNN, cudnnStatus_t, CUDNN_STATUS_NOT_INITIALIZED, cudnnBackendExecute,
            (cudnnHandle_t h, cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t v), (h, p, v))

extern "C" void cudnnGetLastErrorString(char *message, size_t max_size) {
    static auto fn = reinterpret_cast<decltype(&cudnnGetLastErrorString)>(
        cuda_lib_symbol(CUDA_LIB_CUDNN, "cudnnGetLastErrorString"));
    if (fn) fn(message, max_size);
    else if (message && max_size) snprintf(message, max_size, "cuDNN is not loaded");
}

VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcCreateProgram,
            (nvrtcProgram * p, const char *src, const char *name, int n, const char *const *headers,
             const char *const *include_names),
            (p, src, name, n, headers, include_names))
VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcDestroyProgram, (nvrtcProgram * p), (p))
VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcCompileProgram,
            (nvrtcProgram p, int n, const char *const *options), (p, n, options))
VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetCUBINSize, (nvrtcProgram p, size_t *s),
            (p, s))
VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetCUBIN, (nvrtcProgram p, char *c), (p, c))
VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetProgramLogSize,
            (nvrtcProgram p, size_t *s), (p, s))
VFM_FORWARD(CUDA_LIB_NVRTC, nvrtcResult, NVRTC_ERROR_INTERNAL_ERROR, nvrtcGetProgramLog, (nvrtcProgram p, char *l),
            (p, l))

// ---- graphs -----------------------------------------------------------------------------------

namespace {

enum Uid : int64_t {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SEQ_Q, UID_SEQ_KV,
    UID_OFF_Q, UID_OFF_K, UID_OFF_V, UID_OFF_O, UID_OFF_STATS, UID_OFF_DO, UID_OFF_DQ, UID_OFF_DK, UID_OFF_DV,
};

struct Key {
    int backward, B, H, Hkv, hd, Sq, Skv;
    bool operator==(const Key &o) const {
        return backward == o.backward && B == o.B && H == o.H && Hkv == o.Hkv && hd == o.hd && Sq == o.Sq &&
               Skv == o.Skv;
    }
};

struct Entry {
    Key key;
    std::shared_ptr<fe::graph::Graph> graph;  // null when declined
    std::string why;
    const char *implementation = "composite";  // the SDPA node that serves it
    int64_t workspace = 0;
};

std::mutex g_mutex;  // the frontend's plans are not guaranteed thread-safe
std::vector<Entry> g_cache;
cudnnHandle_t g_handle;
int g_state = -1;  // -1 not tried, 0 unavailable, 1 ready
std::string g_unavailable;

using Tensor_t = std::shared_ptr<fe::graph::Tensor_attributes>;

Tensor_t vec_tensor(fe::graph::Graph &g, const char *name, int64_t uid, int64_t n, fe::DataType_t type) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1}).set_data_type(type));
}

// [B, heads, S, hd], token-major strides, ragged by off.
void bhsd(fe::graph::Tensor_attributes &t, const Key &k, int heads, int S, const Tensor_t &off) {
    int64_t B = k.B, h = heads, s = S, d = k.hd;
    t.set_dim({B, h, s, d}).set_stride({s * h * d, d, h * d, 1}).set_ragged_offset(off);
}

Tensor_t input(fe::graph::Graph &g, const char *name, int64_t uid, const Key &k, int heads, int S, const Tensor_t &off) {
    fe::graph::Tensor_attributes t;
    t.set_name(name).set_uid(uid);
    bhsd(t, k, heads, S, off);
    return g.tensor(t);
}

std::string check(fe::error_t e, const char *step) {
    return e.is_good() ? std::string() : std::string(step) + ": " + e.get_message();
}

// Builds the graph of k with the forward's SDPA implementation impl (the backward has one);
// returns "" or why cuDNN declined.
std::string build(const Key &k, Entry &entry, fe::AttentionImplementation_t impl) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const float scale = 1.0f / std::sqrt((float)k.hd);
    auto seq_q = vec_tensor(*g, "seq_q", UID_SEQ_Q, k.B, fe::DataType_t::INT32);
    auto seq_kv = vec_tensor(*g, "seq_kv", UID_SEQ_KV, k.B, fe::DataType_t::INT32);
    auto off = [&](const char *name, int64_t uid) { return vec_tensor(*g, name, uid, k.B + 1, fe::DataType_t::INT64); };
    auto Q = input(*g, "Q", UID_Q, k, k.H, k.Sq, off("off_q", UID_OFF_Q));
    auto K = input(*g, "K", UID_K, k, k.Hkv, k.Skv, off("off_k", UID_OFF_K));
    auto V = input(*g, "V", UID_V, k, k.Hkv, k.Skv, off("off_v", UID_OFF_V));
    if (!k.backward) {
        auto opts = fe::graph::SDPA_attributes()
                        .set_name("sdpa_forward")
                        .set_generate_stats(true)
                        .set_attn_scale(scale)
                        .set_padding_mask(true)
                        .set_seq_len_q(seq_q)
                        .set_seq_len_kv(seq_kv)
                        .set_implementation(impl);
        auto [O, stats] = g->sdpa(Q, K, V, opts);
        O->set_output(true).set_uid(UID_O);
        bhsd(*O, k, k.H, k.Sq, off("off_o", UID_OFF_O));
        int64_t B = k.B, h = k.H, s = k.Sq;
        stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT)
            .set_dim({B, h, s, 1}).set_stride({s * h, 1, h, 1}).set_ragged_offset(off("off_stats", UID_OFF_STATS));
    } else {
        auto O = input(*g, "O", UID_O, k, k.H, k.Sq, off("off_o", UID_OFF_O));
        auto dO = input(*g, "dO", UID_DO, k, k.H, k.Sq, off("off_do", UID_OFF_DO));
        int64_t B = k.B, h = k.H, s = k.Sq;
        auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(UID_STATS)
                                   .set_data_type(fe::DataType_t::FLOAT).set_dim({B, h, s, 1})
                                   .set_stride({s * h, 1, h, 1}).set_ragged_offset(off("off_stats", UID_OFF_STATS)));
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("sdpa_backward")
                        .set_attn_scale(scale)
                        .set_padding_mask(true)
                        .set_seq_len_q(seq_q)
                        .set_seq_len_kv(seq_kv)
                        .set_deterministic_algorithm(true);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
        dQ->set_output(true).set_uid(UID_DQ);
        bhsd(*dQ, k, k.H, k.Sq, off("off_dq", UID_OFF_DQ));
        dK->set_output(true).set_uid(UID_DK);
        bhsd(*dK, k, k.Hkv, k.Skv, off("off_dk", UID_OFF_DK));
        dV->set_output(true).set_uid(UID_DV);
        bhsd(*dV, k, k.Hkv, k.Skv, off("off_dv", UID_OFF_DV));
    }
    std::string why = check(g->validate(), "validate");
    if (why.empty()) why = check(g->build_operation_graph(g_handle), "build_operation_graph");
    if (why.empty()) why = check(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
    if (why.empty()) why = check(g->check_support(g_handle), "check_support");
    if (why.empty()) why = check(g->build_plans(g_handle), "build_plans");
    if (why.empty()) why = check(g->get_workspace_size(entry.workspace), "get_workspace_size");
    if (why.empty()) entry.graph = g;
    return why;
}

// cuDNN loaded, version new enough, handle made; else the reason in g_unavailable.
bool ready(void) {
    if (g_state >= 0) return g_state == 1;
    g_state = 0;
    if (cuda_lib_open(CUDA_LIB_CUDNN) != VFM_OK) {
        g_unavailable = vfm_last_error();
        return false;
    }
    size_t version = cudnnGetVersion();
    if (version < 90600) {  // ragged GQA and ragged Stats need 9.6
        g_unavailable = "cuDNN " + std::to_string(version) + " is older than 9.6 (ragged GQA and ragged statistics)";
        return false;
    }
    cudnnStatus_t s = cudnnCreate(&g_handle);
    if (s != CUDNN_STATUS_SUCCESS) {
        g_unavailable = std::string("cudnnCreate: ") + cudnnGetErrorString(s);
        return false;
    }
    g_state = 1;
    return true;
}

Key key_of(const CudnnAttnArgs *a) { return Key{a->backward ? 1 : 0, a->B, a->H, a->Hkv, a->hd, a->Sq, a->Skv}; }

std::string describe(const Key &k) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s B=%d H=%d Hkv=%d hd=%d Sq<=%d Skv<=%d", k.backward ? "backward" : "forward", k.B, k.H,
             k.Hkv, k.hd, k.Sq, k.Skv);
    return buf;
}

Entry *find(const Key &k) {
    for (auto &e : g_cache)
        if (e.key == k) return &e;
    return nullptr;
}

}  // namespace

// The forward with the unified SDPA node, else with the composite one; the backward (composite).
// The frontend throws when no implementation fits the attributes: that is a decline too.
void build_entry(const Key &k, Entry &entry) {
    auto attempt = [&](fe::AttentionImplementation_t impl) {
        try {
            return build(k, entry, impl);
        } catch (const std::exception &ex) {
            return std::string("sdpa: ") + ex.what();
        }
    };
    if (k.backward) {
        entry.why = attempt(fe::AttentionImplementation_t::COMPOSITE);
        entry.implementation = "composite";
        return;
    }
    std::string unified = attempt(fe::AttentionImplementation_t::UNIFIED);
    entry.implementation = "unified";
    if (unified.empty()) return;
    entry.why = attempt(fe::AttentionImplementation_t::COMPOSITE);
    entry.implementation = "composite";
    if (!entry.why.empty()) entry.why = "unified: " + unified + "; composite: " + entry.why;
}

extern "C" vfm_status cudnn_attention_prepare(CudnnAttnArgs *a, size_t *workspace_bytes) {
    std::lock_guard<std::mutex> lock(g_mutex);
    *workspace_bytes = 0;
    try {
        if (!ready()) return vfm_fail(VFM_ERR_UNSUPPORTED, "cuDNN attention: %s", g_unavailable.c_str());
        Key k = key_of(a);
        Entry *e = find(k);
        if (!e) {
            Entry fresh;
            fresh.key = k;
            build_entry(k, fresh);
            g_cache.push_back(fresh);
            e = &g_cache.back();
        }
        if (!e->graph)
            return vfm_fail(VFM_ERR_UNSUPPORTED, "cuDNN attention declines %s: %s", describe(k).c_str(), e->why.c_str());
        *workspace_bytes = (size_t)e->workspace;
        a->implementation = e->implementation;
        return VFM_OK;
    } catch (const std::exception &ex) {
        return vfm_fail(VFM_ERR_UNSUPPORTED, "cuDNN attention: %s", ex.what());
    }
}

extern "C" vfm_status cudnn_attention_run(const CudnnAttnArgs *a, void *workspace) {
    std::lock_guard<std::mutex> lock(g_mutex);
    try {
        Key k = key_of(a);
        Entry *e = find(k);
        if (!e || !e->graph)
            return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention: %s was not prepared", describe(k).c_str());
        cudnnStatus_t s = cudnnSetStream(g_handle, (cudaStream_t)a->stream);
        if (s != CUDNN_STATUS_SUCCESS)
            return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention: cudnnSetStream: %s", cudnnGetErrorString(s));
        std::unordered_map<int64_t, void *> pack = {
            {UID_Q, (void *)a->q},           {UID_K, (void *)a->k},           {UID_V, (void *)a->v},
            {UID_O, a->o},                   {UID_STATS, a->lse},             {UID_SEQ_Q, (void *)a->seq_q},
            {UID_SEQ_KV, (void *)a->seq_kv}, {UID_OFF_Q, (void *)a->off_q},   {UID_OFF_K, (void *)a->off_kv},
            {UID_OFF_V, (void *)a->off_kv},  {UID_OFF_O, (void *)a->off_q},   {UID_OFF_STATS, (void *)a->off_lse},
        };
        if (a->backward) {
            pack[UID_DO] = (void *)a->dout;
            pack[UID_DQ] = a->dq;
            pack[UID_DK] = a->dk;
            pack[UID_DV] = a->dv;
            pack[UID_OFF_DO] = (void *)a->off_q;
            pack[UID_OFF_DQ] = (void *)a->off_q;
            pack[UID_OFF_DK] = (void *)a->off_kv;
            pack[UID_OFF_DV] = (void *)a->off_kv;
        }
        fe::error_t err = e->graph->execute(g_handle, pack, workspace);
        if (!err.is_good())
            return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention %s: execute: %s", describe(k).c_str(),
                            err.get_message().c_str());
        return VFM_OK;
    } catch (const std::exception &ex) {
        return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention: %s", ex.what());
    }
}

extern "C" const char *cudnn_attention_frontend_version(void) {
    static char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
             CUDNN_FRONTEND_PATCH_VERSION);
    return buf;
}
