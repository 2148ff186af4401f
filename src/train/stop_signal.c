/* The stop flag set by SIGTERM / SIGUSR1 while training (stop_signal.h). */
#include "train/stop_signal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;
static volatile sig_atomic_t g_grace = 30;
static struct sigaction g_old_term, g_old_usr1, g_old_alrm;
static int g_installed;

static void on_stop_signal(int sig) {
    if (g_signal) return;
    g_signal = sig;
    alarm((unsigned)g_grace);
}

/* The grace ran out: the step never ended (a peer is gone, or blocked). End as SIGTERM would. */
static void on_grace_over(int sig) {
    (void)sig;
    static const char msg[] = "vfm: stop signal: the step did not end within its grace (a peer may have died): "
                              "ending without a checkpoint\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    signal(SIGTERM, SIG_DFL);
    raise(SIGTERM);
}

void stop_signal_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a read or write in progress goes on */
    g_signal = 0;
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGUSR1, &sa, &g_old_usr1);
    sa.sa_handler = on_grace_over;
    sigaction(SIGALRM, &sa, &g_old_alrm);
    g_installed = 1;
}

void stop_signal_restore(void) {
    if (!g_installed) return;
    alarm(0);
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGUSR1, &g_old_usr1, NULL);
    sigaction(SIGALRM, &g_old_alrm, NULL);
    g_installed = 0;
}

int stop_signal_received(void) { return g_signal; }

void stop_signal_set_grace(double step_seconds, double save_seconds) {
    double g = STOP_GRACE_MIN_SECONDS + 3 * step_seconds + 2 * save_seconds;
    g_grace = g < 1e6 ? (sig_atomic_t)g + 1 : 1000000;
}

void stop_signal_agreed(void) { alarm(0); }

const char *stop_signal_name(int sig) {
    static char buf[32];
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGUSR1) return "SIGUSR1";
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}
