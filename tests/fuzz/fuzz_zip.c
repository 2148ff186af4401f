/* Fuzz target: the zip reader (src/data/formats/zip.c) on a memory buffer: the end records, the central
 * directory, every entry's payload view, lookups by name and CRC checks; then the torch.save
 * container on top of it (a `.pth` part: one tensor, and a state dict; torch_check.h). */
#include <string.h>

#include "data/formats/zip.h"
#include "torch_check.h"

FUZZ_QUIET_INITIALIZE

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ZipArchive *z;
    if (zip_open_memory(&z, data, size, "fuzz.pth") == VFM_OK) {
        int n = zip_count(z);
        FUZZ_CHECK(n >= 0, "count %d", n);
        for (int i = 0; i < n; i++) {
            const ZipEntry *e = zip_entry(z, i);
            FUZZ_CHECK(e != NULL && e->name != NULL, "entry %d", i);
            fuzz_touch(e->name, strlen(e->name));
            FUZZ_CHECK(e->data >= data && e->data <= data + size && e->size <= (uint64_t)(data + size - e->data),
                       "entry '%s': %llu bytes at offset %lld of a %zu-byte buffer", e->name,
                       (unsigned long long)e->size, (long long)(e->data - data), size);
            fuzz_touch(e->data, (size_t)e->size);
            int found = zip_find(z, e->name);
            FUZZ_CHECK(found >= 0 && found <= i && strcmp(zip_entry(z, found)->name, e->name) == 0,
                       "zip_find('%s') = %d for entry %d", e->name, found, i);
            const uint8_t *d;
            uint64_t sz;
            if (zip_read(z, i, &d, &sz) == VFM_OK)
                FUZZ_CHECK(d == e->data && sz == e->size, "zip_read of '%s' differs from its entry", e->name);
        }
        zip_close(z);
    }
    fuzz_torch_readers(data, size, "fuzz.pth");
    return 0;
}
