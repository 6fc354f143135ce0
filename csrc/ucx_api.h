/* The libucp functions meshrt uses, resolved at run time with dlopen.
 *
 * Why not link against libucp: the library comes from the libucx-cu12 wheel (or a
 * cluster's own UCX, with InfiniBand), whose path is only known at run time, and
 * meshrt._C must import on machines where no UCX loads at all. */
#ifndef MESHRT_UCX_API_H
#define MESHRT_UCX_API_H

#include <ucp/api/ucp.h>

typedef struct {
    ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **);
    void (*config_release)(ucp_config_t *);
    ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
                                 ucp_context_h *);
    void (*cleanup)(ucp_context_h);
    ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
    void (*worker_destroy)(ucp_worker_h);
    ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **, size_t *);
    void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
    unsigned (*worker_progress)(ucp_worker_h);
    ucs_status_t (*worker_get_efd)(ucp_worker_h, int *);
    ucs_status_t (*worker_arm)(ucp_worker_h);
    ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
    ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
    ucs_status_t (*mem_map)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
    ucs_status_t (*mem_unmap)(ucp_context_h, ucp_mem_h);
    ucs_status_t (*rkey_pack)(ucp_context_h, ucp_mem_h, void **, size_t *);
    void (*rkey_buffer_release)(void *);
    ucs_status_t (*ep_rkey_unpack)(ucp_ep_h, const void *, ucp_rkey_h *);
    void (*rkey_destroy)(ucp_rkey_h);
    ucs_status_ptr_t (*get_nbx)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h, const ucp_request_param_t *);
    ucs_status_ptr_t (*put_nbx)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h,
                                const ucp_request_param_t *);
    ucs_status_ptr_t (*ep_flush_nbx)(ucp_ep_h, const ucp_request_param_t *);
    ucs_status_t (*request_check_status)(void *);
    void (*request_free)(void *);
    const char *(*status_string)(ucs_status_t);
} meshrt_ucx_api;

/* Loads libucp from `path` (a file, or a soname for the system loader). On failure
 * returns -1 and writes the reason into err. */
int meshrt_ucx_load(const char *path, meshrt_ucx_api *api, char *err, size_t errlen);

#endif
