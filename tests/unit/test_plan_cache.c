/* The bounded plan cache behind the CUDA GEMMs (src/ops/plan_cache.h): pack token counts, samples
 * per pack and caption lengths change every step, so a run meets thousands of GEMM shapes. The
 * cache must never refuse one (it used to stop the run after 512) and must destroy exactly what it
 * evicts, least recently used first. */
#include <string.h>

#include "ops/plan_cache.h"
#include "test.h"

/* Shaped like linear.cu's GemmKey: the token count n varies. */
typedef struct {
    int32_t transa, transb;
    int64_t m, n, k;
    int32_t dtype, epilogue;
} Key;

typedef struct {
    int64_t n;      /* the shape it was made for */
    int *alive;     /* alive[n]: 1 while the plan's descriptors exist */
} Plan;

typedef struct {
    int destroyed;
    int double_destroy;
} Ledger;

static void destroy_plan(void *value, void *ctx) {
    Plan *p = value;
    Ledger *l = ctx;
    if (!p->alive[p->n]) l->double_destroy++;
    p->alive[p->n] = 0;
    l->destroyed++;
}

static Key key_of(int64_t n) {
    Key k;
    memset(&k, 0, sizeof k);
    k.transa = 1, k.m = 1152, k.n = n, k.k = 1152, k.dtype = 14;
    return k;
}

#define SHAPES 2000
#define CAPACITY 256

TEST(plan_cache_2000_shapes_bounded_lru) {
    static int alive[SHAPES + 1];
    memset(alive, 0, sizeof alive);
    Ledger ledger = {0, 0};
    PlanCache c;
    REQUIRE_OK(plan_cache_init(&c, CAPACITY, sizeof(Key), sizeof(Plan), destroy_plan, &ledger));
    Key hot = key_of(SHAPES); /* used before every new shape: must never be evicted */
    Plan *p = plan_cache_insert(&c, &hot);
    p->n = SHAPES, p->alive = alive, alive[SHAPES] = 1;
    for (int64_t n = 0; n < SHAPES; n++) {
        REQUIRE(plan_cache_find(&c, &hot) != NULL);
        Key k = key_of(n);
        CHECK(plan_cache_find(&c, &k) == NULL);
        p = plan_cache_insert(&c, &k);
        REQUIRE(p != NULL);
        CHECK(p->n == 0 && p->alive == NULL); /* a fresh, zeroed slot */
        p->n = n, p->alive = alive, alive[n] = 1;
        REQUIRE(c.count <= CAPACITY);
    }
    int live = 0;
    for (int i = 0; i <= SHAPES; i++) live += alive[i];
    CHECK(c.count == CAPACITY);
    CHECK_MSG(live == CAPACITY, "%d plans alive, capacity %d", live, CAPACITY);
    CHECK(ledger.destroyed == SHAPES + 1 - CAPACITY && c.evictions == ledger.destroyed);
    CHECK(ledger.double_destroy == 0);
    CHECK(alive[SHAPES]);
    /* the newest CAPACITY-1 shapes are the ones kept, each findable under its own key */
    for (int64_t n = 0; n < SHAPES; n++) {
        Key k = key_of(n);
        Plan *f = plan_cache_find(&c, &k);
        int kept = n >= SHAPES - (CAPACITY - 1);
        CHECK_MSG((f != NULL) == kept && alive[n] == kept, "shape n=%lld: found %d, alive %d", (long long)n, f != NULL,
                  alive[n]);
        if (f) CHECK(f->n == n);
    }
    plan_cache_free(&c);
    CHECK(ledger.destroyed == SHAPES + 1 && ledger.double_destroy == 0);
    for (int i = 0; i <= SHAPES; i++) CHECK(!alive[i]);
}
