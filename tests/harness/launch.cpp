// The CPU harness, the block scheduler: runs a kernel launch on the host with the launch's own
// grid, block and shared-memory sizes, after checking them as the GPU does.
//
// The blocks run one after another. The threads of a block are fibers (one stack each, switched by
// a few instructions of assembly on x86-64, by ucontext elsewhere) on the calling thread, switched
// only where CUDA lets threads wait for each other: __syncthreads and the warp collectives. Between two barriers every thread runs to its next one in an order
// drawn per (launch, block, barrier phase) from VFM_HARNESS_SEED: forward, reverse or shuffled, so
// a read that a missing barrier leaves unordered against a write sees the wrong value in some
// block. The block's __shared__ memory (the section vfm_shared, device.h) is filled with 0xff bytes
// — NaN for f32/f64/bf16, -1 for integers — when each block starts. A barrier that some threads of
// the block reach while others have exited, a warp collective whose lanes disagree, and threads
// that wait for each other forever are faults of the launch, reported with the kernel, block and
// thread; so are launch sizes the GPU refuses (launch errors, as cudaLaunchKernel reports them).
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mutex>

#include "device.h"
#include "runtime.h"

#include "fiber.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define HARNESS_ASAN 1
#else
#define HARNESS_ASAN 0
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

// __start_/__stop_vfm_shared: the linker's bounds of the section (weak: a binary may have none)
extern "C" char __start_vfm_shared[] __attribute__((weak));
extern "C" char __stop_vfm_shared[] __attribute__((weak));

namespace vfm_harness {
namespace {

enum State { READY, AT_BARRIER, AT_WARP, RELEASED, DONE };  // RELEASED: from a warp collective, runs next pass
enum Order { FORWARD, REVERSE, SHUFFLED };

const size_t kStackBytes = (size_t)256 << 10;  // ASan's redzones make frames several times larger
const size_t kGuardBytes = 4096;               // below each stack: an overflow faults, not corrupts

struct Fiber {
    FiberContext ctx;
    char *stack;  // kStackBytes above a guard page
    uint3 tid;
    int linear;   // thread index within the block
    State state;
    // the warp collective it waits in
    WarpOp op;
    unsigned mask;
    uint64_t value, result;
    int arg, width;
    void *fake_stack;  // ASan's bookkeeping while switched out
};

struct Block {
    const char *kernel;
    Fiber *fibers;
    int n;
    uint64_t launch, block;  // for the order
    int phase;
    char fault[512];
} g_block;

Fiber g_pool[1024];      // one per thread of the largest block; stacks made on first use
FiberContext g_scheduler;  // the launching thread's context while a fiber runs
Fiber *g_current;
void (*g_body)(void *);
void *g_body_ctx;
const void *g_sched_stack_bottom;
size_t g_sched_stack_size;
void *g_sched_fake_stack;
std::mutex g_launch_mutex;  // one launch at a time: the built-in variables and shared memory are global
uint64_t g_launches;

uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t seed(void) {
    static uint64_t s = [] {
        const char *e = getenv("VFM_HARNESS_SEED");
        return e && *e ? strtoull(e, NULL, 0) : 1;
    }();
    return s;
}

void fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fault(const char *fmt, ...) {
    if (g_block.fault[0]) return;  // the first one explains the rest
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_block.fault, sizeof g_block.fault, fmt, ap);
    va_end(ap);
}

// ---- switching, annotated for ASan so it knows which stack is live ---------------------------

void switch_to_fiber(Fiber *f) {
    g_current = f;
    threadIdx = f->tid;
#if HARNESS_ASAN
    __sanitizer_start_switch_fiber(&g_sched_fake_stack, f->stack, kStackBytes);
#endif
    fiber_switch(&g_scheduler, &f->ctx);
#if HARNESS_ASAN
    __sanitizer_finish_switch_fiber(g_sched_fake_stack, NULL, NULL);
#endif
    g_current = NULL;
}

void arrived_in_fiber(Fiber *f) {
#if HARNESS_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &g_sched_stack_bottom, &g_sched_stack_size);
#else
    (void)f;
#endif
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void yield(State state) {
    Fiber *f = g_current;
    f->state = state;
#if HARNESS_ASAN
    __sanitizer_start_switch_fiber(state == DONE ? NULL : &f->fake_stack, g_sched_stack_bottom, g_sched_stack_size);
#endif
    fiber_switch(&f->ctx, &g_scheduler);
    arrived_in_fiber(f);
}

void fiber_main(void) {
    arrived_in_fiber(g_current);
    g_body(g_body_ctx);
    yield(DONE);  // never returns: a DONE fiber is not resumed
}

bool fiber_init(Fiber *f) {
    if (!f->stack) {
        char *m = (char *)mmap(NULL, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return false;
        mprotect(m, kGuardBytes, PROT_NONE);
        f->stack = m + kGuardBytes;
    }
    fiber_make(&f->ctx, f->stack, kStackBytes, fiber_main);
    f->state = READY;
    f->fake_stack = NULL;
    return true;
}

// ---- the order threads run in between two barriers --------------------------------------------

void order_threads(int *idx, int n) {
    Order order = (Order)(splitmix(seed() ^ splitmix(g_block.launch) ^ splitmix(g_block.block * 7919 + 1) ^
                                   (uint64_t)g_block.phase) % 3);
    for (int i = 0; i < n; i++) idx[i] = order == REVERSE ? n - 1 - i : i;
    if (order == SHUFFLED) {
        uint64_t r = splitmix(seed() + g_block.launch * 31 + g_block.block * 131 + (uint64_t)g_block.phase);
        for (int i = n - 1; i > 0; i--) {
            r = splitmix(r);
            int j = (int)(r % (uint64_t)(i + 1)), t = idx[i];
            idx[i] = idx[j], idx[j] = t;
        }
    }
}

// ---- warp collectives ------------------------------------------------------------------------

const char *op_name(WarpOp op) {
    switch (op) {
    case WARP_SYNC: return "__syncwarp";
    case WARP_SHFL: return "__shfl_sync";
    case WARP_SHFL_XOR: return "__shfl_xor_sync";
    case WARP_SHFL_UP: return "__shfl_up_sync";
    case WARP_SHFL_DOWN: return "__shfl_down_sync";
    case WARP_BALLOT: return "__ballot_sync";
    }
    return "?";
}

// The source lane of lane under op (-1: the lane keeps its own value, as shfl_up/down at the edge).
int source_lane(const Fiber *f, int lane) {
    int w = f->width, base = lane & ~(w - 1), src = lane;
    switch (f->op) {
    case WARP_SHFL: src = base + (f->arg & (w - 1)); break;
    case WARP_SHFL_XOR: src = lane ^ f->arg; break;
    case WARP_SHFL_UP: src = lane - f->arg < base ? -1 : lane - f->arg; break;
    case WARP_SHFL_DOWN: src = lane + f->arg >= base + w ? -1 : lane + f->arg; break;
    default: break;
    }
    return src;
}

// When every lane of f's mask has arrived: computes the results and appends those lanes to ready.
// Returns 1 when it released them (0: still waiting, or a fault).
int try_complete(Fiber *f, int *ready, int *nready) {
    int warp0 = f->linear & ~31;
    Fiber *lane_f[32] = {NULL};
    for (int l = 0; l < 32; l++) {
        if (!(f->mask >> l & 1)) continue;
        if (warp0 + l >= g_block.n) {
            fault("%s with mask 0x%08x names lane %d, past the block's %d threads", op_name(f->op), f->mask, l,
                  g_block.n);
            return 0;
        }
        Fiber *o = &g_block.fibers[warp0 + l];
        if (o->state == DONE) {
            fault("%s (mask 0x%08x) in warp %d: lane %d has exited", op_name(f->op), f->mask, warp0 / 32, l);
            return 0;
        }
        if (o->state != AT_WARP) return 0;
        if (o->op != f->op || o->mask != f->mask || o->width != f->width) {
            fault("warp %d: lane %d is in %s (mask 0x%08x), lane %d in %s (mask 0x%08x)", warp0 / 32, f->linear & 31,
                  op_name(f->op), f->mask, l, op_name(o->op), o->mask);
            return 0;
        }
        lane_f[l] = o;
    }
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if (lane_f[l] && lane_f[l]->value) ballot |= 1u << l;
    for (int l = 0; l < 32; l++) {
        Fiber *o = lane_f[l];
        if (!o) continue;
        if (o->op == WARP_BALLOT) o->result = ballot;
        else if (o->op != WARP_SYNC) {
            int src = source_lane(o, l);
            if (src < 0) o->result = o->value;
            else if (src > 31 || !lane_f[src]) {
                fault("%s in warp %d: lane %d reads lane %d, which is not in the mask 0x%08x", op_name(o->op),
                      warp0 / 32, l, src, o->mask);
                return 0;
            } else o->result = lane_f[src]->value;
        }
        o->state = RELEASED;
        ready[(*nready)++] = o->linear;
    }
    return 1;
}

// ---- one block ---------------------------------------------------------------------------------

// Runs the block's threads to the end; returns false after a fault (g_block.fault says which).
bool run_block(int *order, int *ready) {
    int n = g_block.n;
    char *shared = __start_vfm_shared, *shared_end = __stop_vfm_shared;
    if (shared && shared_end > shared) memset(shared, 0xff, (size_t)(shared_end - shared));
    for (int i = 0; i < n; i++)
        if (!fiber_init(&g_block.fibers[i])) {
            fault("no memory for the stack of thread %d", i);
            return false;
        }
    g_block.phase = 0;
    order_threads(order, n);
    int nqueue = n;
    int *queue = order;
    for (;;) {
        int nready = 0;
        for (int q = 0; q < nqueue; q++) {
            Fiber *f = &g_block.fibers[queue[q]];
            if (f->state != READY) continue;
            switch_to_fiber(f);
            if (f->state == AT_WARP) try_complete(f, ready, &nready);
            if (g_block.fault[0]) return false;
        }
        if (nready) {  // lanes released by a warp collective continue, in this phase
            for (int i = 0; i < nready; i++) g_block.fibers[ready[i]].state = READY;
            memcpy(order, ready, (size_t)nready * sizeof *order);
            queue = order, nqueue = nready;
            continue;
        }
        int done = 0, at_barrier = 0, at_warp = -1;
        for (int i = 0; i < n; i++) {
            State s = g_block.fibers[i].state;
            done += s == DONE;
            at_barrier += s == AT_BARRIER;
            if (s == AT_WARP && at_warp < 0) at_warp = i;
        }
        if (done == n) return true;
        if (at_warp >= 0) {
            const Fiber *f = &g_block.fibers[at_warp];
            fault("thread %d waits in %s (mask 0x%08x) for lanes that never arrive (%d threads at __syncthreads, "
                  "%d exited)", at_warp, op_name(f->op), f->mask, at_barrier, done);
            return false;
        }
        if (done) {
            fault("__syncthreads reached by %d threads of the block while %d have exited", at_barrier, done);
            return false;
        }
        g_block.phase++;  // every thread is at the barrier: release them in a new order
        for (int i = 0; i < n; i++) g_block.fibers[i].state = READY;
        order_threads(order, n);
        queue = order, nqueue = n;
    }
}

// ---- launch checks -----------------------------------------------------------------------------

bool launch_ok(const char *name, const void *kernel, dim3 grid, dim3 block, size_t shmem) {
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    const char *why = NULL;
    char buf[256];
    if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) why = "a zero grid or block dimension";
    else if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) {
        snprintf(buf, sizeof buf, "block (%u,%u,%u) = %llu threads (at most 1024; x, y <= 1024, z <= 64)", block.x,
                 block.y, block.z, threads);
        why = buf;
    } else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        snprintf(buf, sizeof buf, "grid (%u,%u,%u) (x < 2^31, y and z <= 65535)", grid.x, grid.y, grid.z);
        why = buf;
    } else if (shmem > runtime_dynamic_shared_limit(kernel)) {
        snprintf(buf, sizeof buf,
                 "%zu bytes of dynamic shared memory (at most %zu; more than 48 KiB needs "
                 "cudaFuncAttributeMaxDynamicSharedMemorySize)",
                 shmem, runtime_dynamic_shared_limit(kernel));
        why = buf;
    }
    if (!why) return true;
    runtime_launch_error(cudaErrorInvalidConfiguration, "kernel %s: %s", name, why);
    return false;
}

}  // namespace

void barrier(void) {
    if (!g_current) {
        fprintf(stderr, "harness: __syncthreads called outside a kernel\n");
        abort();
    }
    yield(AT_BARRIER);
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    Fiber *f = g_current;
    if (!f) {
        fprintf(stderr, "harness: %s called outside a kernel\n", op_name(op));
        abort();
    }
    if (!(mask >> (f->linear & 31) & 1))
        fault("%s: lane %d calls it with mask 0x%08x, which leaves the lane out", op_name(op), f->linear & 31, mask);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fault("%s: width %d is not a power of two <= 32", op_name(op), width);
    f->op = op, f->mask = mask, f->value = value, f->arg = arg, f->width = width, f->result = 0;
    yield(AT_WARP);
    return f->result;
}

uint64_t g_vector_accesses;

void vector_access(const void *p) {
    if (!g_current) {
        fprintf(stderr, "harness: a 16-byte access outside a kernel\n");
        abort();
    }
    if ((uintptr_t)p & 15) {
        fault("thread %d: a 16-byte access at %p, which is not a multiple of 16 (misaligned address)",
              g_current->linear, p);
        yield(AT_BARRIER);  // never resumed: the block stops at the fault, before the access
    }
    g_vector_accesses++;
}

uint64_t vector_accesses(void) { return g_vector_accesses; }

void run_kernel(const char *name, const void *kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                void (*body)(void *), void *ctx) {
    std::lock_guard<std::mutex> lock(g_launch_mutex);
    if (!runtime_stream_ok(stream, name)) return;
    if (!launch_ok(name, kernel, grid, block, shmem)) return;
    if (runtime_sticky_error() != cudaSuccess) return;  // a faulted context runs nothing
    int n = (int)(block.x * block.y * block.z);
    static int order[1024], ready[1024];
    g_body = body, g_body_ctx = ctx;
    gridDim = grid, blockDim = block;
    memset(&g_block, 0, sizeof g_block);
    g_block.kernel = name, g_block.fibers = g_pool, g_block.n = n, g_block.launch = ++g_launches;
    for (int i = 0; i < n; i++) {
        g_pool[i].linear = i;
        g_pool[i].tid = uint3{(unsigned)i % block.x, (unsigned)i / block.x % block.y, (unsigned)i / (block.x * block.y)};
    }
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = uint3{x, y, z};
                g_block.block = ((uint64_t)z * grid.y + y) * grid.x + x;
                if (run_block(order, ready)) continue;
#if HARNESS_ASAN  // the abandoned fibers leave their frames' redzones behind
                for (int i = 0; i < n; i++) __asan_unpoison_memory_region(g_pool[i].stack, kStackBytes);
#endif
                runtime_kernel_fault("kernel %s, block (%u,%u,%u) of (%u,%u,%u), %u threads: %s", name, x, y, z,
                                     grid.x, grid.y, grid.z, n, g_block.fault);
                return;
            }
}

}  // namespace vfm_harness
