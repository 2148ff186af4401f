/* CPU backend: patchify and unpatchify, the einops rearrangement
 * "C (T pt)(H ph)(W pw) <-> (T H W)(ph pw pt C)" between a latent and its token rows. */
#include "real.h"

/* Shared index walk: for every token and every element inside it, calls the copy in the given
 * direction. to_tokens = 1: tokens <- latent (patchify); 0: latent <- tokens (unpatchify). */
static void patch_copy(real *tokens, real *latent, int64_t C, int64_t T, int64_t H, int64_t W, int pt, int ph,
                       int pw, int to_tokens) {
    int64_t Tn = T / pt, Hn = H / ph, Wn = W / pw, n_tokens = Tn * Hn * Wn;
    int64_t token_dim = (int64_t)ph * pw * pt * C;
#pragma omp parallel for schedule(static)
    for (int64_t tok = 0; tok < n_tokens; tok++) {
        int64_t tt = tok / (Hn * Wn), hh = (tok / Wn) % Hn, ww = tok % Wn;
        real *row = tokens + tok * token_dim;
        int64_t j = 0; /* inside a token: C fastest, then pt, then pw, then ph */
        for (int iph = 0; iph < ph; iph++)
            for (int ipw = 0; ipw < pw; ipw++)
                for (int ipt = 0; ipt < pt; ipt++) {
                    int64_t t = tt * pt + ipt, h = hh * ph + iph, w = ww * pw + ipw;
                    for (int64_t c = 0; c < C; c++, j++) {
                        real *cell = latent + ((c * T + t) * H + h) * W + w;
                        if (to_tokens) row[j] = *cell;
                        else *cell = row[j];
                    }
                }
    }
}

/* tokens[T'·H'·W', ph·pw·pt·C] = rearrange(latent[C, T'·pt, H'·ph, W'·pw]) */
vfm_status CPU_FN(patchify)(Tensor *tokens, const Tensor *latent, int pt, int ph, int pw) {
    patch_copy(RDATA(tokens), (real *)latent->data, latent->shape[0], latent->shape[1], latent->shape[2],
               latent->shape[3], pt, ph, pw, 1);
    return VFM_OK;
}

/* latent[C, T'·pt, H'·ph, W'·pw] = inverse rearrangement of tokens[T'·H'·W', ph·pw·pt·C] */
vfm_status CPU_FN(unpatchify)(Tensor *latent, const Tensor *tokens, int pt, int ph, int pw) {
    patch_copy((real *)tokens->data, RDATA(latent), latent->shape[0], latent->shape[1], latent->shape[2],
               latent->shape[3], pt, ph, pw, 0);
    return VFM_OK;
}
