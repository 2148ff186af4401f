/* Memory of packs and the ordered sum: pack_init says when it gets no memory (and leaves a pack
 * pack_free takes), pack_copy into a used pack frees what it held, and the CPU ordered sum over
 * ranks refuses a dtype it cannot add instead of leaving each rank its own rows. */
#include <malloc.h>
#include <stdint.h>
#include <string.h>

#include "alloc_fail.h"
#include "data/pack/pack.h"
#include "parallel/comm_internal.h"
#include "test.h"

TEST(pack_init_checks_its_allocations) {
    Pack p;
    alloc_fail_when(sizeof(int32_t), 1); /* one of the four leading offsets */
    vfm_status s = pack_init(&p, 8, 4, 1, 1);
    alloc_fail_off();
    CHECK(alloc_fail_refused() == 1);
    CHECK_MSG(s == VFM_ERR_NOMEM && strstr(vfm_last_error(), "out of memory"), "%s", vfm_last_error());
    CHECK(!p.cu_seqlens && !p.cu_seqlens_padded && !p.cu_text && !p.cu_text_padded);
    pack_free(&p); /* safe */
    CHECK_OK(pack_init(&p, 8, 4, 1, 1));
    pack_free(&p);
}

TEST(pack_copy_into_a_used_pack_frees_what_it_held) {
    Pack src, dst;
    REQUIRE_OK(pack_init(&src, 16, 8, 1, 1));
    float tokens[64 * 16] = {0}, text[4 * 8] = {0};
    EncodedSample e;
    memset(&e, 0, sizeof e);
    e.info.tokens = e.info.tokens_padded = 64;
    e.info.grid[0] = 1, e.info.grid[1] = 8, e.info.grid[2] = 8;
    e.info.text_tokens = e.info.text_tokens_padded = 4;
    e.info.class_label = -1;
    e.tokens = tokens;
    e.text = text;
    REQUIRE_OK(pack_append(&src, &e));
    REQUIRE_OK(pack_init(&dst, 16, 8, 1, 1));
    REQUIRE_OK(pack_copy(&dst, &src));
    size_t before = mallinfo2().uordblks;
    for (int i = 0; i < 200; i++) REQUIRE_OK(pack_copy(&dst, &src));
    size_t after = mallinfo2().uordblks;
    CHECK_MSG(after <= before + 4096, "200 copies into one pack kept %zu bytes more", after - before);
    CHECK(dst.n_samples == 1 && dst.n_tokens == 64);
    pack_free(&dst);
    pack_free(&src);
}

TEST(ordered_sum_adds_bf16_and_refuses_a_dtype_it_cannot_add) {
    float rows[6] = {1, 2, 3, 10, 20, 30}, dst[3] = {0};
    CHECK_OK(comm_sum_rows_ordered(dst, rows, 2, 3, DT_F32));
    CHECK(dst[0] == 11 && dst[1] == 22 && dst[2] == 33);
    /* bf16: 1 + 2^-8 rounds to 1 (the tie to even) before the next 2^-8 comes: 1, not 1 + 2^-7 */
    uint16_t half[6] = {bf16_from_f32(1.0f), bf16_from_f32(3.0f), bf16_from_f32(0x1p-8f), bf16_from_f32(4.0f),
                        bf16_from_f32(0x1p-8f), bf16_from_f32(0.5f)}, out[2] = {7, 7};
    CHECK_OK(comm_sum_rows_ordered(out, half, 3, 2, DT_BF16));
    CHECK(f32_from_bf16(out[0]) == 1.0f && f32_from_bf16(out[1]) == 7.5f);
    CHECK(comm_sum_rows_ordered(out, half, 2, 2, (DType)99) == VFM_ERR_INTERNAL);
    CHECK_MSG(strstr(vfm_last_error(), "not supported"), "%s", vfm_last_error());
    vfm_clear_error();
}
