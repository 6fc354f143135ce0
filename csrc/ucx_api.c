#include "ucx_api.h"

#include <dlfcn.h>
#include <stdio.h>

#define RESOLVE(field, symbol)                                                          \
    do {                                                                                \
        *(void **)(&api->field) = dlsym(lib, symbol);                                   \
        if (api->field == NULL) {                                                       \
            snprintf(err, errlen, "%s has no symbol %s (UCX too old?)", path, symbol);  \
            return -1;                                                                  \
        }                                                                               \
    } while (0)

int meshrt_ucx_load(const char *path, meshrt_ucx_api *api, char *err, size_t errlen) {
    /* RTLD_GLOBAL: UCX loads its transport modules (libuct_cma, libuct_cuda, ...) with
     * dlopen later, and they expect libucs/libuct symbols to be visible. */
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        snprintf(err, errlen, "cannot load %s: %s", path, dlerror());
        return -1;
    }
    RESOLVE(config_read, "ucp_config_read");
    RESOLVE(config_release, "ucp_config_release");
    RESOLVE(init_version, "ucp_init_version");
    RESOLVE(cleanup, "ucp_cleanup");
    RESOLVE(worker_create, "ucp_worker_create");
    RESOLVE(worker_destroy, "ucp_worker_destroy");
    RESOLVE(worker_get_address, "ucp_worker_get_address");
    RESOLVE(worker_release_address, "ucp_worker_release_address");
    RESOLVE(worker_progress, "ucp_worker_progress");
    RESOLVE(worker_get_efd, "ucp_worker_get_efd");
    RESOLVE(worker_arm, "ucp_worker_arm");
    RESOLVE(ep_create, "ucp_ep_create");
    RESOLVE(ep_close_nbx, "ucp_ep_close_nbx");
    RESOLVE(mem_map, "ucp_mem_map");
    RESOLVE(mem_unmap, "ucp_mem_unmap");
    RESOLVE(rkey_pack, "ucp_rkey_pack");
    RESOLVE(rkey_buffer_release, "ucp_rkey_buffer_release");
    RESOLVE(ep_rkey_unpack, "ucp_ep_rkey_unpack");
    RESOLVE(rkey_destroy, "ucp_rkey_destroy");
    RESOLVE(get_nbx, "ucp_get_nbx");
    RESOLVE(put_nbx, "ucp_put_nbx");
    RESOLVE(ep_flush_nbx, "ucp_ep_flush_nbx");
    RESOLVE(request_check_status, "ucp_request_check_status");
    RESOLVE(request_free, "ucp_request_free");
    RESOLVE(status_string, "ucs_status_string");
    return 0;
}
