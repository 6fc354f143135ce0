/* Same-machine copies between processes with cross-memory attach
 * (process_vm_readv/writev): one copy, by the kernel, with no shared segment to set
 * up and a clean error (ESRCH) when the other process is gone. UCX's own shared
 * memory transports cannot report a dead peer (they lack UCX's peer-failure
 * handling), so the CPU path on one machine is this. Needs permission to ptrace the
 * peer: same user, and Yama's ptrace_scope 0 (or an ancestor relation). */
#ifndef MESHRT_CMA_COPY_H
#define MESHRT_CMA_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Returns 0, or an errno value (ESRCH: the peer is gone; EPERM: not allowed; EFAULT: bad range). */
int cma_copy(pid_t pid, uint64_t local, uint64_t remote, size_t nbytes, int write);

/* A read split into up to ``parts`` page-aligned ranges copied by as many threads at
 * once (one thread reaches about half of memcpy's speed). Same return values. */
#define CMA_MAX_PARTS 8
int cma_read_split(pid_t pid, uint64_t local, uint64_t remote, size_t nbytes, int parts);

#endif
