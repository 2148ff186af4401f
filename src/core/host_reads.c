/* The count of host waits for device results (host_reads.h): a total and a small tally by place. */
#include "core/host_reads.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define PLACES 32

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_total;
static const char *g_name[PLACES];
static uint64_t g_count[PLACES];

void vfm_host_read(const char *what) {
    pthread_mutex_lock(&g_lock);
    g_total++;
    for (int i = 0; i < PLACES; i++) {
        if (g_name[i] && strcmp(g_name[i], what) != 0) continue;
        g_name[i] = what;
        g_count[i]++;
        break;
    }
    pthread_mutex_unlock(&g_lock);
}

uint64_t vfm_host_reads(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t n = g_total;
    pthread_mutex_unlock(&g_lock);
    return n;
}

void vfm_host_reads_report(char *buf, size_t n) {
    pthread_mutex_lock(&g_lock);
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < PLACES && g_name[i] && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s ×%llu", k ? ", " : "", g_name[i], (unsigned long long)g_count[i]);
    pthread_mutex_unlock(&g_lock);
}

void vfm_host_reads_reset(void) {
    pthread_mutex_lock(&g_lock);
    memset(g_name, 0, sizeof g_name);
    memset(g_count, 0, sizeof g_count);
    pthread_mutex_unlock(&g_lock);
}
