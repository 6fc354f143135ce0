/* One UCX context and worker per process: registration, endpoints, one-sided get/put.
 *
 * Every call takes the transport's mutex, so any thread may call; the worker is
 * created UCS_THREAD_MODE_SERIALIZED accordingly. Completion callbacks run inside
 * progress() and only append to a C queue: Python drains it from its event loop
 * when the worker's event fd becomes readable. */
#ifndef MESHRT_UCX_TRANSPORT_H
#define MESHRT_UCX_TRANSPORT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ucx_api.h"

typedef struct {
    uint64_t token;
    int status;
} meshrt_event;

typedef struct {
    meshrt_event *items;
    size_t len, cap;
} meshrt_events;

typedef struct {
    meshrt_ucx_api api;
    ucp_context_h context;
    ucp_worker_h worker;
    pthread_mutex_t lock;
    meshrt_events done;    /* (token, status) of finished transfers */
    meshrt_events failed;  /* (endpoint, status) of endpoints that lost their peer */
    ucp_address_t *address;
    size_t address_len;
    int efd;
    int open;
} meshrt_ucx;

int mx_open(meshrt_ucx *mx, const char *libpath, char *err, size_t errlen);
void mx_close(meshrt_ucx *mx);
void mx_forget_after_fork(meshrt_ucx *mx);
unsigned mx_progress(meshrt_ucx *mx);
/* 1: armed (sleep on the fd); 0: events pending, progress again; <0: error status */
int mx_arm(meshrt_ucx *mx);
ucs_status_t mx_mem_map(meshrt_ucx *mx, void *addr, size_t len, int cuda, ucp_mem_h *memh, void **rkey,
                        size_t *rkey_len);
ucs_status_t mx_mem_unmap(meshrt_ucx *mx, ucp_mem_h memh);
void mx_rkey_buffer_release(meshrt_ucx *mx, void *rkey);
ucs_status_t mx_ep_create(meshrt_ucx *mx, const void *address, ucp_ep_h *ep);
void mx_ep_close(meshrt_ucx *mx, ucp_ep_h ep);
ucs_status_t mx_rkey_unpack(meshrt_ucx *mx, ucp_ep_h ep, const void *rkey, ucp_rkey_h *out);
void mx_rkey_destroy(meshrt_ucx *mx, ucp_rkey_h rkey);
/* UCS_OK: done now; UCS_INPROGRESS: (token, status) will appear in mx->done; else an error. */
ucs_status_t mx_rma(meshrt_ucx *mx, int is_put, ucp_ep_h ep, ucp_rkey_h rkey, void *local, size_t len,
                    uint64_t remote, uint64_t token, int cuda);
/* Moves the queued events into out (which the caller frees); returns their count. */
size_t mx_take(meshrt_ucx *mx, meshrt_events *queue, meshrt_event **out);

#endif
