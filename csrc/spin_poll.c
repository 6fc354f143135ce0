#define _GNU_SOURCE
#include "spin_poll.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int spin_poll(const int *fds, int nfds, int64_t ns) {
    struct pollfd pfds[SPIN_POLL_MAX_FDS];
    if (nfds > SPIN_POLL_MAX_FDS) nfds = SPIN_POLL_MAX_FDS;
    for (int i = 0; i < nfds; i++) {
        pfds[i].fd = fds[i];
        pfds[i].events = POLLIN;
        pfds[i].revents = 0;
    }
    int64_t deadline = now_ns() + ns;
    for (;;) {
        int r = poll(pfds, (nfds_t)nfds, 0);
        if (r > 0) {
            int ready = 0;
            for (int i = 0; i < nfds; i++)
                if (pfds[i].revents) ready |= 1 << i;
            return ready;
        }
        if (r < 0 && errno != EINTR) return -errno;
        if (now_ns() >= deadline) return 0;
        sched_yield(); /* (a runnable thread on this CPU goes first: the spin only fills idle time) */
    }
}
