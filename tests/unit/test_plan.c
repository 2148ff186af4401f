/* The stream plan (src/data/loader/plan.c): each epoch plan holds every sample exactly once, bins stay
 * within the budget and within their buffer, plans are a pure function of (seed, epoch, lengths),
 * first-fit-decreasing beats a greedy baseline where it should, and the global pack numbering
 * concatenates the epoch plans. */
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "data/loader/plan.h"
#include "test.h"

/* Padded lengths (multiples of 64 in [64, 512]) drawn from Philox. */
static int32_t *random_lengths(int64_t n, uint64_t seed) {
    int32_t *len = malloc((size_t)n * sizeof *len);
    for (int64_t i = 0; i < n; i++)
        len[i] = 64 * (1 + (int32_t)(philox_uniform_at(seed, RNG_STREAM_DATA, 0, 77, (uint64_t)i) * 8.0f));
    return len;
}

/* Checks the invariants of one epoch plan; returns 1 when they hold. */
static int check_epoch(const EpochPlan *ep, const int32_t *len, int64_t n, const PlanConfig *pc) {
    int ok = ep->n_items == n && ep->pack_start[0] == 0 && ep->pack_start[ep->n_packs] == n;
    char *seen = calloc((size_t)n, 1);
    for (int64_t i = 0; ok && i < n; i++) {
        int64_t s = ep->items[i];
        if (s < 0 || s >= n || seen[s]) ok = 0;
        else seen[s] = 1;
    }
    for (int64_t p = 0; ok && p < ep->n_packs; p++) {
        int64_t sum = 0;
        if (ep->pack_start[p + 1] <= ep->pack_start[p]) ok = 0; /* no empty pack */
        for (int64_t k = ep->pack_start[p]; k < ep->pack_start[p + 1]; k++) sum += len[ep->items[k]];
        if (sum > pc->budget) ok = 0;
    }
    free(seen);
    return ok;
}

TEST(plan_every_epoch_holds_every_sample_once) {
    int64_t n = 257;
    int32_t *len = random_lengths(n, 1);
    PlanConfig pc = {1234, 1, 16, 512};
    for (int64_t e = 0; e < 5; e++) {
        EpochPlan ep;
        REQUIRE_OK(plan_epoch(&pc, len, n, e, &ep));
        CHECK_MSG(check_epoch(&ep, len, n, &pc), "epoch %lld breaks an invariant", (long long)e);
        CHECK(ep.epoch == e);
        /* at least the lower bound ceil(total / budget) */
        int64_t total = 0;
        for (int64_t i = 0; i < n; i++) total += len[i];
        int64_t lower = (total + 511) / 512;
        CHECK(ep.n_packs >= lower);
        epoch_plan_free(&ep);
    }
    free(len);
}

TEST(plan_is_a_pure_function_of_seed_and_epoch) {
    int64_t n = 100;
    int32_t *len = random_lengths(n, 2);
    PlanConfig pc = {99, 1, 10, 512};
    EpochPlan a, b, c, d;
    REQUIRE_OK(plan_epoch(&pc, len, n, 3, &a));
    REQUIRE_OK(plan_epoch(&pc, len, n, 3, &b));
    CHECK(a.n_packs == b.n_packs);
    CHECK(memcmp(a.items, b.items, (size_t)n * sizeof *a.items) == 0);
    CHECK(memcmp(a.pack_start, b.pack_start, (size_t)(a.n_packs + 1) * sizeof *a.pack_start) == 0);
    PlanConfig other = pc;
    other.seed = 100;
    REQUIRE_OK(plan_epoch(&other, len, n, 3, &c));
    CHECK(memcmp(a.items, c.items, (size_t)n * sizeof *a.items) != 0);
    REQUIRE_OK(plan_epoch(&pc, len, n, 4, &d));
    CHECK(memcmp(a.items, d.items, (size_t)n * sizeof *a.items) != 0);
    epoch_plan_free(&a);
    epoch_plan_free(&b);
    epoch_plan_free(&c);
    epoch_plan_free(&d);
    free(len);
}

TEST(plan_bins_stay_inside_their_buffer) {
    /* without shuffling, buffer b is samples [b·B, (b+1)·B): no pack mixes two buffers */
    int64_t n = 50, B = 7;
    int32_t *len = random_lengths(n, 3);
    PlanConfig pc = {5, 0, B, 512};
    EpochPlan ep;
    REQUIRE_OK(plan_epoch(&pc, len, n, 0, &ep));
    CHECK(check_epoch(&ep, len, n, &pc));
    for (int64_t p = 0; p < ep.n_packs; p++)
        for (int64_t k = ep.pack_start[p]; k < ep.pack_start[p + 1]; k++)
            CHECK(ep.items[k] / B == ep.items[ep.pack_start[p]] / B);
    /* and in buffer order: the buffer of pack p never decreases */
    for (int64_t p = 1; p < ep.n_packs; p++) CHECK(ep.items[ep.pack_start[p]] / B >= ep.items[ep.pack_start[p - 1]] / B);
    /* inside a pack, samples come longest first */
    for (int64_t p = 0; p < ep.n_packs; p++)
        for (int64_t k = ep.pack_start[p] + 1; k < ep.pack_start[p + 1]; k++) CHECK(len[ep.items[k - 1]] >= len[ep.items[k]]);
    epoch_plan_free(&ep);
    /* with shuffling the set of samples of each buffer is still packed apart: every pack's samples
     * come from one shuffled buffer, so the packs of the epoch split into groups of B samples */
    pc.shuffle = 1;
    REQUIRE_OK(plan_epoch(&pc, len, n, 0, &ep));
    CHECK(check_epoch(&ep, len, n, &pc));
    int64_t at = 0;
    for (int64_t p = 0; p < ep.n_packs; p++) {
        int64_t next = ep.pack_start[p + 1];
        /* a buffer boundary (multiple of B) never falls strictly inside a pack */
        for (int64_t q = at + 1; q < next; q++) CHECK(q % B != 0);
        at = next;
    }
    epoch_plan_free(&ep);
    free(len);
}

/* Next-fit in the given order: the baseline FFD must beat. */
static int64_t next_fit(const int32_t *len, int64_t n, int64_t budget) {
    int64_t bins = 0, used = budget + 1;
    for (int64_t i = 0; i < n; i++) {
        if (used + len[i] > budget) bins++, used = 0;
        used += len[i];
    }
    return bins;
}

TEST(plan_uses_first_fit_decreasing) {
    /* 128,192,128,192 into 256: greedy in order needs 4 bins, FFD 3 ([192],[192],[128,128]) */
    int32_t len[4] = {128, 192, 128, 192};
    int64_t bin[4];
    CHECK(next_fit(len, 4, 256) == 4);
    CHECK(plan_first_fit_decreasing(len, 4, 256, bin) == 3);
    CHECK(bin[1] == 0 && bin[3] == 1 && bin[0] == 2 && bin[2] == 2);
    PlanConfig pc = {1, 0, 4, 256};
    EpochPlan ep;
    REQUIRE_OK(plan_epoch(&pc, len, 4, 0, &ep));
    CHECK(ep.n_packs == 3);
    CHECK(ep.items[0] == 1 && ep.items[1] == 3 && ep.items[2] == 0 && ep.items[3] == 2);
    epoch_plan_free(&ep);
    /* first fit, not next fit: a later small item goes back into the first bin with room */
    int32_t len2[5] = {320, 320, 192, 128, 64};
    int64_t bin2[5];
    CHECK(plan_first_fit_decreasing(len2, 5, 512, bin2) == 2);
    CHECK(bin2[0] == 0 && bin2[1] == 1 && bin2[2] == 0 && bin2[3] == 1 && bin2[4] == 1);
    /* on random data FFD is never worse than next fit here */
    int32_t *r = random_lengths(400, 9);
    int64_t *b = malloc(400 * sizeof *b);
    int64_t ffd = plan_first_fit_decreasing(r, 400, 512, b), nf = next_fit(r, 400, 512);
    CHECK_MSG(ffd < nf, "ffd %lld bins, next fit %lld", (long long)ffd, (long long)nf);
    for (int64_t k = 0; k < ffd; k++) {
        int64_t sum = 0;
        for (int64_t i = 0; i < 400; i++)
            if (b[i] == k) sum += r[i];
        CHECK(sum > 0 && sum <= 512);
    }
    free(b);
    free(r);
}

TEST(plan_global_packs_concatenate_epochs) {
    int64_t n = 60;
    int32_t *len = random_lengths(n, 4);
    PlanConfig pc = {7, 1, 8, 512};
    Plan *plan;
    REQUIRE_OK(plan_create(&plan, &pc, len, n));
    int64_t g = 0;
    for (int64_t e = 0; e < 4; e++) {
        EpochPlan ep;
        REQUIRE_OK(plan_epoch(&pc, len, n, e, &ep));
        int64_t np;
        REQUIRE_OK(plan_epoch_packs(plan, e, &np));
        CHECK(np == ep.n_packs);
        for (int64_t p = 0; p < ep.n_packs; p++, g++) {
            int64_t epoch, pin;
            const int64_t *items;
            int k;
            REQUIRE_OK(plan_pack(plan, g, &epoch, &pin, &items, NULL, &k));
            CHECK(epoch == e && pin == p);
            CHECK(k == ep.pack_start[p + 1] - ep.pack_start[p]);
            CHECK(memcmp(items, ep.items + ep.pack_start[p], (size_t)k * sizeof *items) == 0);
        }
        epoch_plan_free(&ep);
    }
    /* random access backwards and far ahead agrees with the sequential walk */
    int64_t epoch, pin;
    const int64_t *items;
    int k;
    REQUIRE_OK(plan_pack(plan, 0, &epoch, &pin, &items, NULL, &k));
    CHECK(epoch == 0 && pin == 0);
    REQUIRE_OK(plan_pack(plan, g + 3, &epoch, &pin, &items, NULL, &k));
    CHECK(epoch >= 4);
    plan_free(plan);
    free(len);
}
