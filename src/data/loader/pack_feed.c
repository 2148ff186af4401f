/* One pack ahead on the GPU, copied on its own stream (see pack_feed.h). */
#include "data/loader/pack_feed.h"

#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"
#include "core/timer.h"

vfm_status pack_feed_init(PackFeed *f, PackSource *src, Device dev, void *compute_stream) {
    memset(f, 0, sizeof *f);
    f->src = src;
    f->device = dev;
    f->compute_stream = compute_stream;
    f->cur = -1;
    for (int j = 0; j < 2; j++) VFM_TRY(pack_init(&f->pack[j], src->token_dim, src->text_dim, 1, 1));
    if (dev != DEV_CUDA) return VFM_OK;
    pack_source_pin(src, 1);
    VFM_TRY(vfm_cuda_stream_create(&f->copy_stream));
    for (int j = 0; j < 2; j++) {
        VFM_TRY(vfm_cuda_event_create(&f->copied[j]));
        VFM_TRY(vfm_cuda_event_create(&f->used[j]));
    }
    return VFM_OK;
}

/* Slot j := the source's next pack, its copy to the device issued on the copy stream. */
static vfm_status fetch_into(PackFeed *f, int j, double *wait) {
    /* the host pack's previous copy is done before its memory changes hands (never-recorded: done) */
    VFM_TRY(vfm_cuda_event_synchronize(f->copied[j]));
    double t0 = time_now();
    VFM_TRY(f->src->next(f->src, &f->pack[j]));
    *wait += time_now() - t0;
    /* the device copy of slot j is overwritten only after the compute that read it */
    VFM_TRY(vfm_cuda_stream_wait_event(f->copy_stream, f->used[j]));
    VFM_TRY(pack_tensors_upload(&f->pt[j], f->device, &f->pack[j], f->copy_stream));
    return vfm_cuda_event_record(f->copied[j], f->copy_stream);
}

vfm_status pack_feed_next(PackFeed *f, const Pack **pack, const PackTensors **pt, double *wait) {
    if (f->device != DEV_CUDA) {
        double t0 = time_now();
        VFM_TRY(f->src->next(f->src, &f->pack[0]));
        *wait += time_now() - t0;
        pack_tensors_view(&f->pt[0], &f->pack[0]);
        f->cur = 0;
        *pack = &f->pack[0];
        *pt = &f->pt[0];
        return VFM_OK;
    }
    /* everything issued so far on the compute stream is all that reads the current slot */
    if (f->cur >= 0) VFM_TRY(vfm_cuda_event_record(f->used[f->cur], f->compute_stream));
    int j = f->cur < 0 ? 0 : f->cur ^ 1;
    if (!f->ahead) VFM_TRY(fetch_into(f, j, wait));
    f->ahead = 0;
    free(f->state_ahead);
    f->state_ahead = NULL;
    f->cur = j;
    VFM_TRY(vfm_cuda_stream_wait_event(f->compute_stream, f->copied[j]));
    /* the next pack: its copy overlaps the compute the caller issues now */
    VFM_TRY(f->src->get_state(f->src, &f->state_ahead));
    VFM_TRY(fetch_into(f, j ^ 1, wait));
    f->ahead = 1;
    *pack = &f->pack[j];
    *pt = &f->pt[j];
    return VFM_OK;
}

vfm_status pack_feed_get_state(PackFeed *f, char **json) {
    if (!f->ahead) return f->src->get_state(f->src, json);
    *json = strdup(f->state_ahead);
    return *json ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "pack feed: the loader state");
}

void pack_feed_free(PackFeed *f) {
    if (f->copy_stream) vfm_cuda_stream_synchronize(f->copy_stream);
    for (int j = 0; j < 2; j++) {
        if (f->device == DEV_CUDA) pack_tensors_free(&f->pt[j]);
        pack_free(&f->pack[j]);
        vfm_cuda_event_destroy(f->copied[j]);
        vfm_cuda_event_destroy(f->used[j]);
    }
    vfm_cuda_stream_destroy(f->copy_stream);
    free(f->state_ahead);
    memset(f, 0, sizeof *f);
}
