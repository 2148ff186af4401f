/* Stopping a run cleanly on a signal: what a cluster sends before it takes the job away.
 * Slurm sends SIGTERM at preemption and, with `--signal=TERM@120`, two minutes before the time
 * limit; `--signal=USR1@120` and Lightning-style scripts use SIGUSR1. While training, either signal
 * only sets a flag. After each step the ranks agree on it (a one-integer maximum over the world,
 * so a rank that got the signal a moment later stops at the same step), the trainer writes a
 * checkpoint at that step (unless one was just written) and returns; `vfm train` then exits with
 * TRAIN_EXIT_STOPPED, which a job script turns into a requeue (scripts/train.sbatch). A second
 * signal during that checkpoint changes nothing; SIGKILL still ends the process at once.
 *
 * The grace. A rank whose peer has died waits in a collective forever, and srun ends such a step
 * with SIGTERM (then SIGKILL after Slurm's KillWait, 30 s by default): caught, it would wait on. So
 * the signal also arms an alarm: when the ranks have not agreed within the grace — a few seconds
 * more than three recent steps and two checkpoint writes — the process ends as SIGTERM would have
 * ended it, with a line saying why. */
#ifndef VFM_TRAIN_STOP_SIGNAL_H
#define VFM_TRAIN_STOP_SIGNAL_H

/* sysexits.h's EX_TEMPFAIL: "a temporary failure; the user is invited to retry". */
#define TRAIN_EXIT_STOPPED 75

/* Installs the SIGTERM and SIGUSR1 handlers (the previous ones are kept for stop_signal_restore)
 * and clears the flag. */
void stop_signal_install(void);
void stop_signal_restore(void);
/* The first stop signal received since stop_signal_install (SIGTERM, SIGUSR1), or 0. */
int stop_signal_received(void);
/* The grace from the latest step's and checkpoint write's durations (see above). */
#define STOP_GRACE_MIN_SECONDS 5
void stop_signal_set_grace(double step_seconds, double save_seconds);
/* The ranks agreed to stop (or to go on): the grace alarm is off. */
void stop_signal_agreed(void);
/* "SIGTERM", "SIGUSR1", or "signal N". */
const char *stop_signal_name(int sig);

#endif
