/* CUDA IPC between processes of one host, through the CUDA driver API.
 *
 * The driver (libcuda.so.1) is opened at run time: a build made with a CUDA toolkit
 * still imports on a machine without a GPU or driver and reports why instead. The
 * driver API, unlike a statically linked runtime, works with whatever driver the
 * machine has, and shares the primary context with PyTorch. */
#ifndef MESHRT_CUDA_IPC_H
#define MESHRT_CUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#define MESHRT_IPC_HANDLE_BYTES 64

/* Returns the number of GPUs (>= 1), or 0 with the reason in err. */
int mc_cuda_init(char *err, size_t errlen);
/* The IPC handle of the allocation holding ptr, ptr's offset in it, and its device. */
int mc_ipc_export(uint64_t ptr, unsigned char *handle, uint64_t *offset, int *device, char *err, size_t errlen);
int mc_ipc_open(const unsigned char *handle, int device, uint64_t *base, char *err, size_t errlen);
int mc_ipc_close(uint64_t base, int device, char *err, size_t errlen);
/* Synchronous copy between any two addresses CUDA knows (device or host). */
int mc_memcpy(uint64_t dst, uint64_t src, size_t n, int device, char *err, size_t errlen);

#endif
