#define _GNU_SOURCE
#include "cma_copy.h"

#include <errno.h>
#include <pthread.h>
#include <sys/uio.h>

int cma_copy(pid_t pid, uint64_t local, uint64_t remote, size_t nbytes, int write) {
    size_t done = 0;
    while (done < nbytes) {
        /* The kernel may move less than asked (it works page by page): go on from there. */
        struct iovec l = {(void *)(uintptr_t)(local + done), nbytes - done};
        struct iovec r = {(void *)(uintptr_t)(remote + done), nbytes - done};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT;
        done += (size_t)n;
    }
    return 0;
}

struct cma_part {
    pid_t pid;
    uint64_t local, remote;
    size_t nbytes;
    int rc;
};

static void *cma_part_main(void *arg) {
    struct cma_part *p = arg;
    p->rc = cma_copy(p->pid, p->local, p->remote, p->nbytes, 0);
    return NULL;
}

int cma_read_split(pid_t pid, uint64_t local, uint64_t remote, size_t nbytes, int parts) {
    if (parts > CMA_MAX_PARTS) parts = CMA_MAX_PARTS;
    if (parts <= 1 || nbytes < (size_t)parts * 4096) return cma_copy(pid, local, remote, nbytes, 0);
    struct cma_part part[CMA_MAX_PARTS];
    pthread_t thread[CMA_MAX_PARTS];
    int started[CMA_MAX_PARTS] = {0};
    size_t step = ((nbytes + parts - 1) / parts + 4095) & ~(size_t)4095; /* page-aligned ranges */
    int n = 0;
    for (size_t at = 0; at < nbytes; at += step, n++) {
        size_t len = nbytes - at < step ? nbytes - at : step;
        part[n] = (struct cma_part){pid, local + at, remote + at, len, 0};
    }
    /* The first range is copied by this thread; each other one by a thread of its own
     * (the kernel copies the ranges in parallel), or here too if none can start. */
    for (int i = 1; i < n; i++) started[i] = pthread_create(&thread[i], NULL, cma_part_main, &part[i]) == 0;
    cma_part_main(&part[0]);
    int rc = part[0].rc;
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(thread[i], NULL);
        else cma_part_main(&part[i]);
        if (!rc) rc = part[i].rc;
    }
    return rc;
}
