#include "cuda_ipc.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*pointer_attribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*ipc_get)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*ipc_open)(CUdeviceptr *, CUipcMemHandle, unsigned int);
    CUresult (*ipc_close)(CUdeviceptr);
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*error_string)(CUresult, const char **);
    int devices;
    char why[256];
} cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;

#define SYM(field, name) \
    if ((*(void **)(&cu.field) = dlsym(lib, name)) == NULL) { \
        snprintf(cu.why, sizeof(cu.why), "the CUDA driver lacks %s (driver too old?)", name); \
        return; \
    }

static void load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        snprintf(cu.why, sizeof(cu.why), "no GPU: the CUDA driver (libcuda.so.1) is not installed");
        return;
    }
    SYM(init, "cuInit");
    SYM(device_count, "cuDeviceGetCount");
    SYM(device_get, "cuDeviceGet");
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    SYM(ctx_push, "cuCtxPushCurrent_v2");
    SYM(ctx_pop, "cuCtxPopCurrent_v2");
    SYM(pointer_attribute, "cuPointerGetAttribute");
    SYM(address_range, "cuMemGetAddressRange_v2");
    SYM(ipc_get, "cuIpcGetMemHandle");
    SYM(ipc_open, "cuIpcOpenMemHandle_v2");
    SYM(ipc_close, "cuIpcCloseMemHandle");
    SYM(memcpy, "cuMemcpy");
    SYM(error_string, "cuGetErrorString");
    CUresult r = cu.init(0);
    int n = 0;
    if (r == CUDA_SUCCESS) r = cu.device_count(&n);
    if (r != CUDA_SUCCESS || n == 0) {
        const char *s = "no device";
        if (r != CUDA_SUCCESS) cu.error_string(r, &s);
        snprintf(cu.why, sizeof(cu.why), "no GPU: %s", s ? s : "cuInit failed");
        return;
    }
    cu.devices = n;
}

static int fail(CUresult r, const char *what, char *err, size_t errlen) {
    const char *s = NULL;
    cu.error_string(r, &s);
    snprintf(err, errlen, "%s: %s", what, s ? s : "unknown CUDA error");
    return -1;
}

/* Make the device's primary context (the one PyTorch uses) current on this thread,
 * on top of whatever was current: done() pops it, so the caller's CUDA device (torch's
 * current device) is left as it was. Each primary context is retained once. */
#define MAX_DEVICES 64
static CUcontext primary[MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

static int use_device(int device, char *err, size_t errlen) {
    if (device < 0 || device >= MAX_DEVICES) {
        snprintf(err, errlen, "GPU %d is out of range", device);
        return -1;
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&primary_lock);
    if (primary[device] == NULL) {
        CUdevice dev;
        r = cu.device_get(&dev, device);
        if (r == CUDA_SUCCESS) r = cu.primary_ctx_retain(&primary[device], dev);
    }
    pthread_mutex_unlock(&primary_lock);
    if (r == CUDA_SUCCESS) r = cu.ctx_push(primary[device]);
    return r == CUDA_SUCCESS ? 0 : fail(r, "selecting the GPU", err, errlen);
}

static void done(void) {
    CUcontext popped;
    cu.ctx_pop(&popped);
}

int mc_cuda_init(char *err, size_t errlen) {
    pthread_once(&once, load);
    if (cu.devices == 0) snprintf(err, errlen, "%s", cu.why);
    return cu.devices;
}

int mc_ipc_export(uint64_t ptr, unsigned char *handle, uint64_t *offset, int *device, char *err, size_t errlen) {
    if (mc_cuda_init(err, errlen) == 0) return -1;
    int ordinal = -1;
    CUresult r = cu.pointer_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr);
    if (r != CUDA_SUCCESS) return fail(r, "the tensor's memory is not CUDA memory", err, errlen);
    if (use_device(ordinal, err, errlen) != 0) return -1;
    CUdeviceptr base;
    size_t size;
    CUipcMemHandle h;
    r = cu.address_range(&base, &size, (CUdeviceptr)ptr);
    if (r == CUDA_SUCCESS) r = cu.ipc_get(&h, base);
    done();
    if (r != CUDA_SUCCESS) return fail(r, "exporting the allocation for CUDA IPC", err, errlen);
    memcpy(handle, h.reserved, MESHRT_IPC_HANDLE_BYTES);
    *offset = (uint64_t)(ptr - base);
    *device = ordinal;
    return 0;
}

int mc_ipc_open(const unsigned char *handle, int device, uint64_t *base, char *err, size_t errlen) {
    if (mc_cuda_init(err, errlen) == 0) return -1;
    if (use_device(device, err, errlen) != 0) return -1;
    CUipcMemHandle h;
    memcpy(h.reserved, handle, MESHRT_IPC_HANDLE_BYTES);
    CUdeviceptr p;
    CUresult r = cu.ipc_open(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    done();
    if (r != CUDA_SUCCESS) return fail(r, "cuIpcOpenMemHandle", err, errlen);
    *base = (uint64_t)p;
    return 0;
}

int mc_ipc_close(uint64_t base, int device, char *err, size_t errlen) {
    if (mc_cuda_init(err, errlen) == 0) return -1;
    if (use_device(device, err, errlen) != 0) return -1;
    CUresult r = cu.ipc_close((CUdeviceptr)base);
    done();
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuIpcCloseMemHandle", err, errlen);
}

int mc_memcpy(uint64_t dst, uint64_t src, size_t n, int device, char *err, size_t errlen) {
    if (mc_cuda_init(err, errlen) == 0) return -1;
    if (use_device(device, err, errlen) != 0) return -1;
    CUresult r = cu.memcpy((CUdeviceptr)dst, (CUdeviceptr)src, n);
    done();
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuMemcpy", err, errlen);
}
