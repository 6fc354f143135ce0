/* Waiting for a descriptor without sleeping, for a short while.
 *
 * Waking a thread that sleeps costs far more than the wait itself when its CPU has
 * gone idle: on a virtual machine whose guest halts idle CPUs, tens of microseconds
 * for the host to run that CPU again (a deep C-state does the same on bare metal).
 * A lane thread that expects its next call soon polls instead, for a bounded time,
 * and yields the CPU between looks so that any thread with work runs first. */
#ifndef MESHRT_SPIN_POLL_H
#define MESHRT_SPIN_POLL_H

#include <stdint.h>

/* Which of ``fds`` became ready within ``ns`` nanoseconds, as a mask (bit i: fds[i];
 * ready: readable, hung up, in error, or not an open descriptor); 0 when the time ran
 * out; a negative errno when poll failed. */
int spin_poll(const int *fds, int nfds, int64_t ns);

#define SPIN_POLL_MAX_FDS 8

#endif
