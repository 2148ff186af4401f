/* The context-parallel split of a pack (src/parallel/cp_layout.c): chunk lengths with samples
 * whose real tokens reach only some ranks (20 tokens at CP4 in a 64-row slot), the layouts the
 * tiles get, the pad rule being enforced, and take/put of chunks as exact inverses. */
#include <stdlib.h>
#include <string.h>

#include "parallel/cp_layout.h"
#include "test.h"

/* Slots of 64 (the encoder's pad multiple) at CP4: chunks of 16 rows. Sample lengths 20 (chunks
 * 16, 4, 0, 0), 64 (16 each), 1 (1, 0, 0, 0) and 50 (16, 16, 16, 2). */
TEST(cp_chunks_lengths_and_layouts) {
    int32_t cu[5] = {0, 20, 84, 85, 135}, cu_pad[5] = {0, 64, 128, 192, 256};
    CpChunks c;
    REQUIRE_OK(cp_chunks_init(&c, 4, cu, cu_pad, 4, DEV_CPU));
    CHECK(c.rows == 64 && c.max_len == 64);
    const int want[4][4] = {{16, 4, 0, 0}, {16, 16, 16, 16}, {1, 0, 0, 0}, {16, 16, 16, 2}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            CHECK_MSG(cp_chunk_valid(&c, j, i) == want[i][j], "sample %d chunk %d: %d real rows, want %d", i, j,
                      cp_chunk_valid(&c, j, i), want[i][j]);
    for (int i = 0; i <= 4; i++) CHECK(c.cu_padded[i] == 16 * i);
    const int max_want[4] = {16, 16, 16, 16};
    for (int j = 0; j < 4; j++) CHECK(c.max_valid[j] == max_want[j]);
    /* chunk 3 vs chunk 1: queries 0, 16, 0, 2 real rows; keys 4, 16, 0, 16 */
    VarlenLayout l = cp_tile_layout(&c, 3, 1);
    const int32_t *q = l.cu_q.data, *k = l.cu_kv.data, *qp = l.cu_q_padded.data;
    const int32_t q_want[5] = {0, 0, 16, 16, 18}, k_want[5] = {0, 4, 20, 20, 36};
    for (int i = 0; i <= 4; i++) CHECK(q[i] == q_want[i] && k[i] == k_want[i] && qp[i] == 16 * i);
    CHECK(l.n_samples == 4 && l.max_q == 16 && l.max_kv == 16);
    /* the queries of chunk 2 against whole samples */
    l = cp_gathered_kv_layout(&c, 2);
    CHECK(((const int32_t *)l.cu_kv.data)[1] == 20 && ((const int32_t *)l.cu_kv_padded.data)[4] == 256 && l.max_kv == 64);
    /* cross-attention: the text side is the whole pack's */
    int32_t cu_t[5] = {0, 3, 4, 9, 10}, cu_tp[5] = {0, 4, 8, 12, 16};
    VarlenLayout whole = {4, TI32(cu, 5), TI32(cu_pad, 5), TI32(cu_t, 5), TI32(cu_tp, 5), 64, 5};
    l = cp_cross_layout(&c, 1, &whole);
    CHECK(l.cu_kv.data == cu_t && l.cu_kv_padded.data == cu_tp && l.max_kv == 5 && l.max_q == 16);
    CHECK(((const int32_t *)l.cu_q.data)[1] == 4 && ((const int32_t *)l.cu_q_padded.data)[1] == 16);
    cp_chunks_free(&c);
}

TEST(cp_chunks_refuse_slots_not_divisible) {
    int32_t cu[3] = {0, 7, 12}, cu_pad[3] = {0, 8, 14}; /* second slot has 6 rows: not a multiple of 4 */
    CpChunks c;
    vfm_status s = cp_chunks_init(&c, 2, cu, cu_pad, 4, DEV_CPU);
    CHECK_MSG(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "sample 1") && strstr(vfm_last_error(), "multiple of 4"),
              "%s", vfm_last_error());
}

/* take then put (every chunk) rebuilds the whole tensor; each chunk holds exactly its rows. */
TEST(cp_take_put_chunks_are_inverse) {
    int32_t cu[4] = {0, 5, 17, 18}, cu_pad[4] = {0, 6, 18, 24}; /* slots 6, 12, 6 at P = 3 */
    CpChunks c;
    REQUIRE_OK(cp_chunks_init(&c, 3, cu, cu_pad, 3, DEV_CPU));
    float whole[24 * 2], back[24 * 2], local[8 * 2];
    for (int i = 0; i < 48; i++) whole[i] = (float)i, back[i] = -1;
    Tensor W = TF32(whole, 24, 2), B = TF32(back, 24, 2), L = TF32(local, 8, 2);
    for (int j = 0; j < 3; j++) {
        REQUIRE_OK(cp_take_chunk(&L, &W, c.cu_padded, 3, 3, j));
        /* local rows: sample 0 (2 rows) at 0, sample 1 (4 rows) at 2, sample 2 (2 rows) at 6 */
        const int starts[3] = {0, 6, 18}, sizes[3] = {2, 4, 2}, at[3] = {0, 2, 6};
        for (int i = 0; i < 3; i++)
            for (int r = 0; r < sizes[i]; r++)
                for (int e = 0; e < 2; e++)
                    CHECK(local[(at[i] + r) * 2 + e] == whole[(starts[i] + j * sizes[i] + r) * 2 + e]);
        REQUIRE_OK(cp_put_chunk(&B, &L, c.cu_padded, 3, 3, j));
    }
    CHECK(memcmp(whole, back, sizeof whole) == 0);
    Tensor bad = TF32(local, 7, 2);
    CHECK(cp_take_chunk(&bad, &W, c.cu_padded, 3, 3, 0) == VFM_ERR_SHAPE);
    cp_chunks_free(&c);
}
