#define _GNU_SOURCE
#include "cma_copy.h"

#include <errno.h>
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
