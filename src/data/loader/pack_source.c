/* What every PackSource shares: destruction and the pinned-packs flag (pack_source.h). */
#include "data/loader/pack_source.h"

void pack_source_destroy(PackSource *s) {
    if (s && s->destroy) s->destroy(s);
}

void pack_source_pin(PackSource *s, int on) { __atomic_store_n(&s->pin_packs, on != 0, __ATOMIC_RELAXED); }

int pack_source_pinned(const PackSource *s) { return __atomic_load_n(&s->pin_packs, __ATOMIC_RELAXED); }
