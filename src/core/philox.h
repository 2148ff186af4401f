/* Philox-4x32-10 counter-based RNG and the normal transform, written once for the CPU and
 * the GPU (the .cu files include this header): the same (key, counter) gives the same bits
 * on both. Every float operation in the transforms goes through FMUL/FADD/FSUB/FDIV so no
 * fused multiply-add is formed (the CPU build also uses -ffp-contract=off), and log/sin/cos
 * are our own polynomials rather than libm's or CUDA's.
 *
 * Keying (design §3): key = (seed low 32 bits, stream ^ seed high 32 bits);
 * counter = (element_index / 4, step, uid low 32, uid high 32); each Philox call yields
 * four uniforms -> four normals (two Box-Muller pairs); element e uses lane e % 4. */
#ifndef VFM_PHILOX_H
#define VFM_PHILOX_H

#include <stdint.h>

#include "core/host_device.h"

#if defined(__CUDA_ARCH__)
#define VFM_FMUL(a, b) __fmul_rn((a), (b))
#define VFM_FADD(a, b) __fadd_rn((a), (b))
#define VFM_FSUB(a, b) __fsub_rn((a), (b))
#define VFM_FDIV(a, b) __fdiv_rn((a), (b))
#define VFM_FSQRT(a) __fsqrt_rn(a)
#else
#include <math.h>
#define VFM_FMUL(a, b) ((float)(a) * (float)(b))
#define VFM_FADD(a, b) ((float)(a) + (float)(b))
#define VFM_FSUB(a, b) ((float)(a) - (float)(b))
#define VFM_FDIV(a, b) ((float)(a) / (float)(b))
#define VFM_FSQRT(a) sqrtf(a)
#endif

/* RNG streams: one per purpose, so draws of one kind never collide with another. */
enum {
    RNG_STREAM_NOISE = 1,   /* diffusion noise per element */
    RNG_STREAM_SIGMA = 2,   /* sigma (or t) per sample */
    RNG_STREAM_CFG = 3,     /* classifier-free-guidance drop coin per sample */
    RNG_STREAM_INIT = 4,    /* parameter initialisation */
    RNG_STREAM_DATA = 5,    /* data order, mock data, synthetic data */
    RNG_STREAM_SAMPLER = 6, /* sampling: initial noise, churn */
};

typedef struct {
    uint32_t key[2];
    uint32_t ctr[4];
} PhiloxState;

VFM_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* Philox-4x32 with 10 rounds (Salmon et al. 2011; Random123's philox4x32_R(10, ...)). */
VFM_HD void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint32_t hi0, lo0, hi1, lo1;
        philox_mulhilo(0xD2511F53u, c0, &hi0, &lo0);
        philox_mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

VFM_HD void philox_key(uint64_t seed, uint32_t stream, uint32_t key[2]) {
    key[0] = (uint32_t)seed;
    key[1] = stream ^ (uint32_t)(seed >> 32);
}

VFM_HD void philox_counter(uint64_t block, uint32_t step, uint64_t uid, uint32_t ctr[4]) {
    ctr[0] = (uint32_t)block;
    ctr[1] = step;
    ctr[2] = (uint32_t)uid;
    ctr[3] = (uint32_t)(uid >> 32);
}

/* Uniform in the open interval (0, 1): the odd 24-bit integer ((x >> 8) | 1) times 2^-24, exact. */
VFM_HD float philox_uniform(uint32_t x) { return (float)((x >> 8) | 1u) * 5.9604644775390625e-8f; }

/* ln(u) for u in (0, 1], ~1 ulp: u = m * 2^e with m in [sqrt(1/2), sqrt(2)),
 * ln m = 2 atanh(s), s = (m-1)/(m+1), odd series to s^9. */
VFM_HD float vfm_logf(float u) {
    union { float f; uint32_t i; } b;
    b.f = u;
    int e = (int)((b.i >> 23) & 0xffu) - 127;
    b.i = (b.i & 0x007fffffu) | 0x3f800000u; /* m in [1, 2) */
    float m = b.f;
    if (m > 1.41421356f) {
        m = VFM_FMUL(m, 0.5f);
        e += 1;
    }
    float s = VFM_FDIV(VFM_FSUB(m, 1.0f), VFM_FADD(m, 1.0f));
    float s2 = VFM_FMUL(s, s);
    float p = 0.11111111f;
    p = VFM_FADD(VFM_FMUL(p, s2), 0.14285715f);
    p = VFM_FADD(VFM_FMUL(p, s2), 0.2f);
    p = VFM_FADD(VFM_FMUL(p, s2), 0.33333334f);
    p = VFM_FADD(VFM_FMUL(p, s2), 1.0f);
    float lnm = VFM_FMUL(VFM_FMUL(2.0f, s), p);
    float fe = (float)e;
    /* ln 2 split in a high part exact in few bits and a low remainder. */
    return VFM_FADD(VFM_FMUL(fe, 0.693145751953125f), VFM_FADD(VFM_FMUL(fe, 1.4286067653e-6f), lnm));
}

/* sin(2*pi*u) and cos(2*pi*u) for u in [0, 1]: reduce to the nearest quarter turn, then
 * Taylor polynomials on [-pi/4, pi/4]. */
VFM_HD void vfm_sincos_2pi(float u, float *sin_out, float *cos_out) {
    int q = (int)VFM_FADD(VFM_FMUL(u, 4.0f), 0.5f);
    float f = VFM_FSUB(u, VFM_FMUL((float)q, 0.25f));
    float x = VFM_FMUL(f, 6.28318530717958647692f);
    float x2 = VFM_FMUL(x, x);
    float sp = -2.5052108e-8f;
    sp = VFM_FADD(VFM_FMUL(sp, x2), 2.7557319e-6f);
    sp = VFM_FADD(VFM_FMUL(sp, x2), -1.9841270e-4f);
    sp = VFM_FADD(VFM_FMUL(sp, x2), 8.3333333e-3f);
    sp = VFM_FADD(VFM_FMUL(sp, x2), -1.6666667e-1f);
    float s = VFM_FADD(x, VFM_FMUL(VFM_FMUL(x, x2), sp));
    float cp = 2.4801587e-5f;
    cp = VFM_FADD(VFM_FMUL(cp, x2), -1.3888889e-3f);
    cp = VFM_FADD(VFM_FMUL(cp, x2), 4.1666668e-2f);
    cp = VFM_FADD(VFM_FMUL(cp, x2), -0.5f);
    float c = VFM_FADD(1.0f, VFM_FMUL(x2, cp));
    switch (q & 3) {
    case 0: *sin_out = s; *cos_out = c; break;
    case 1: *sin_out = c; *cos_out = -s; break;
    case 2: *sin_out = -s; *cos_out = -c; break;
    default: *sin_out = -c; *cos_out = s; break;
    }
}

/* Two standard normals from two uniforms (Box-Muller). */
VFM_HD void vfm_box_muller(float u1, float u2, float *z0, float *z1) {
    float r = VFM_FSQRT(VFM_FMUL(-2.0f, vfm_logf(u1)));
    float s, c;
    vfm_sincos_2pi(u2, &s, &c);
    *z0 = VFM_FMUL(r, c);
    *z1 = VFM_FMUL(r, s);
}

/* Four normals for counter block `block` of (key, step, uid). */
VFM_HD void philox_normal4(const uint32_t key[2], uint64_t block, uint32_t step, uint64_t uid, float out[4]) {
    uint32_t ctr[4], x[4];
    philox_counter(block, step, uid, ctr);
    philox4x32_10(ctr, key, x);
    vfm_box_muller(philox_uniform(x[0]), philox_uniform(x[1]), &out[0], &out[1]);
    vfm_box_muller(philox_uniform(x[2]), philox_uniform(x[3]), &out[2], &out[3]);
}

/* Four uniforms in (0,1) for counter block `block`. */
VFM_HD void philox_uniform4(const uint32_t key[2], uint64_t block, uint32_t step, uint64_t uid, float out[4]) {
    uint32_t ctr[4], x[4];
    philox_counter(block, step, uid, ctr);
    philox4x32_10(ctr, key, x);
    for (int i = 0; i < 4; i++) out[i] = philox_uniform(x[i]);
}

/* Single draws addressed by element index (convenience for scalar per-sample draws). */
VFM_HD float philox_normal_at(uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid, uint64_t element) {
    uint32_t key[2];
    float z[4];
    philox_key(seed, stream, key);
    philox_normal4(key, element >> 2, step, uid, z);
    return z[element & 3];
}

VFM_HD float philox_uniform_at(uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid, uint64_t element) {
    uint32_t key[2];
    float u[4];
    philox_key(seed, stream, key);
    philox_uniform4(key, element >> 2, step, uid, u);
    return u[element & 3];
}

/* 64-bit mixing hash (splitmix64 finaliser) for sample uids and seeds derived from strings. */
VFM_HD uint64_t vfm_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif
