#include "ucx_transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int push(meshrt_events *q, uint64_t token, int status) {
    if (q->len == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        meshrt_event *grown = realloc(q->items, cap * sizeof(meshrt_event));
        if (grown == NULL) return -1;
        q->items = grown;
        q->cap = cap;
    }
    q->items[q->len].token = token;
    q->items[q->len].status = status;
    q->len++;
    return 0;
}

typedef struct {
    meshrt_ucx *mx;
    uint64_t token;
} rma_ctx;

/* UCX calls this from progress() (we hold the lock). */
static void on_rma_done(void *request, ucs_status_t status, void *user_data) {
    rma_ctx *ctx = user_data;
    push(&ctx->mx->done, ctx->token, (int)status);
    ctx->mx->api.request_free(request);
    free(ctx);
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    meshrt_ucx *mx = arg;
    push(&mx->failed, (uint64_t)(uintptr_t)ep, (int)status);
}

void mx_forget_after_fork(meshrt_ucx *mx) {
    /* The parent's worker, sockets and lock state are not ours: start from nothing
     * (what the parent allocated stays allocated, unreachable, in this child). */
    memset(mx, 0, sizeof(*mx));
}

int mx_open(meshrt_ucx *mx, const char *libpath, char *err, size_t errlen) {
    memset(mx, 0, sizeof(*mx));
    if (meshrt_ucx_load(libpath, &mx->api, err, errlen) != 0) return -1;
    ucp_config_t *config = NULL;
    ucs_status_t st = mx->api.config_read(NULL, NULL, &config);  /* honours UCX_* env */
    if (st != UCS_OK) {
        snprintf(err, errlen, "ucp_config_read: %s", mx->api.status_string(st));
        return -1;
    }
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    st = mx->api.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &mx->context);
    mx->api.config_release(config);
    if (st != UCS_OK) {
        snprintf(err, errlen, "ucp_init: %s", mx->api.status_string(st));
        return -1;
    }
    ucp_worker_params_t wparams;
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    st = mx->api.worker_create(mx->context, &wparams, &mx->worker);
    if (st == UCS_OK) st = mx->api.worker_get_address(mx->worker, &mx->address, &mx->address_len);
    if (st == UCS_OK) st = mx->api.worker_get_efd(mx->worker, &mx->efd);
    if (st != UCS_OK) {
        snprintf(err, errlen, "ucp worker: %s", mx->api.status_string(st));
        if (mx->address) mx->api.worker_release_address(mx->worker, mx->address);
        if (mx->worker) mx->api.worker_destroy(mx->worker);
        mx->api.cleanup(mx->context);
        return -1;
    }
    pthread_mutex_init(&mx->lock, NULL);
    mx->open = 1;
    return 0;
}

void mx_close(meshrt_ucx *mx) {
    if (!mx->open) return;
    pthread_mutex_lock(&mx->lock);
    mx->open = 0;
    mx->api.worker_release_address(mx->worker, mx->address);
    mx->api.worker_destroy(mx->worker);  /* frees outstanding requests */
    mx->api.cleanup(mx->context);
    free(mx->done.items);
    free(mx->failed.items);
    memset(&mx->done, 0, sizeof(mx->done));
    memset(&mx->failed, 0, sizeof(mx->failed));
    pthread_mutex_unlock(&mx->lock);
}

unsigned mx_progress(meshrt_ucx *mx) {
    unsigned total = 0, n;
    pthread_mutex_lock(&mx->lock);
    if (mx->open) {
        /* Bounded: a peer streaming to us must not keep the caller's loop forever. */
        for (int i = 0; i < 1024 && (n = mx->api.worker_progress(mx->worker)) != 0; i++) total += n;
    }
    pthread_mutex_unlock(&mx->lock);
    return total;
}

int mx_arm(meshrt_ucx *mx) {
    pthread_mutex_lock(&mx->lock);
    ucs_status_t st = mx->open ? mx->api.worker_arm(mx->worker) : UCS_OK;
    pthread_mutex_unlock(&mx->lock);
    if (st == UCS_OK) return 1;
    if (st == UCS_ERR_BUSY) return 0;
    return (int)st;
}

ucs_status_t mx_mem_map(meshrt_ucx *mx, void *addr, size_t len, int cuda, ucp_mem_h *memh, void **rkey,
                        size_t *rkey_len) {
    ucp_mem_map_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                   UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    p.address = addr;
    p.length = len;
    p.memory_type = cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    pthread_mutex_lock(&mx->lock);
    ucs_status_t st = mx->open ? mx->api.mem_map(mx->context, &p, memh) : UCS_ERR_NOT_CONNECTED;
    if (st == UCS_OK) {
        st = mx->api.rkey_pack(mx->context, *memh, rkey, rkey_len);
        if (st != UCS_OK) mx->api.mem_unmap(mx->context, *memh);
    }
    pthread_mutex_unlock(&mx->lock);
    return st;
}

ucs_status_t mx_mem_unmap(meshrt_ucx *mx, ucp_mem_h memh) {
    pthread_mutex_lock(&mx->lock);
    ucs_status_t st = mx->open ? mx->api.mem_unmap(mx->context, memh) : UCS_OK;
    pthread_mutex_unlock(&mx->lock);
    return st;
}

void mx_rkey_buffer_release(meshrt_ucx *mx, void *rkey) {
    pthread_mutex_lock(&mx->lock);
    if (mx->open) mx->api.rkey_buffer_release(rkey);
    pthread_mutex_unlock(&mx->lock);
}

ucs_status_t mx_ep_create(meshrt_ucx *mx, const void *address, ucp_ep_h *ep) {
    ucp_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = address;
    /* PEER: a dead owner fails its transfers instead of hanging them. */
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_ep_error;
    p.err_handler.arg = mx;
    pthread_mutex_lock(&mx->lock);
    ucs_status_t st = mx->open ? mx->api.ep_create(mx->worker, &p, ep) : UCS_ERR_NOT_CONNECTED;
    pthread_mutex_unlock(&mx->lock);
    return st;
}

void mx_ep_close(meshrt_ucx *mx, ucp_ep_h ep) {
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    pthread_mutex_lock(&mx->lock);
    if (mx->open) {
        ucs_status_ptr_t req = mx->api.ep_close_nbx(ep, &p);
        if (UCS_PTR_IS_PTR(req)) mx->api.request_free(req);  /* released once complete */
    }
    pthread_mutex_unlock(&mx->lock);
}

ucs_status_t mx_rkey_unpack(meshrt_ucx *mx, ucp_ep_h ep, const void *rkey, ucp_rkey_h *out) {
    pthread_mutex_lock(&mx->lock);
    ucs_status_t st = mx->open ? mx->api.ep_rkey_unpack(ep, rkey, out) : UCS_ERR_NOT_CONNECTED;
    pthread_mutex_unlock(&mx->lock);
    return st;
}

void mx_rkey_destroy(meshrt_ucx *mx, ucp_rkey_h rkey) {
    pthread_mutex_lock(&mx->lock);
    if (mx->open) mx->api.rkey_destroy(rkey);
    pthread_mutex_unlock(&mx->lock);
}

ucs_status_t mx_rma(meshrt_ucx *mx, int is_put, ucp_ep_h ep, ucp_rkey_h rkey, void *local, size_t len,
                    uint64_t remote, uint64_t token, int cuda) {
    rma_ctx *ctx = malloc(sizeof(rma_ctx));
    if (ctx == NULL) return UCS_ERR_NO_MEMORY;
    ctx->mx = mx;
    ctx->token = token;
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucp_request_param_t done;
    memset(&done, 0, sizeof(done));
    done.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    done.cb.send = on_rma_done;
    done.user_data = ctx;
    ucs_status_ptr_t req;
    pthread_mutex_lock(&mx->lock);
    if (!mx->open) {
        req = UCS_STATUS_PTR(UCS_ERR_NOT_CONNECTED);
    } else if (is_put) {
        /* A put completes when our buffer is free again; the flush after it completes
         * once the bytes are in the owner's memory, which is what write_from promises. */
        req = mx->api.put_nbx(ep, local, len, remote, rkey, &p);
        if (UCS_PTR_IS_PTR(req)) {
            mx->api.request_free(req);  /* released by UCX once complete */
            req = NULL;
        }
        if (!UCS_PTR_IS_ERR(req)) req = mx->api.ep_flush_nbx(ep, &done);
    } else {
        p.op_attr_mask |= done.op_attr_mask;
        p.cb.send = on_rma_done;
        p.user_data = ctx;
        req = mx->api.get_nbx(ep, local, len, remote, rkey, &p);
    }
    pthread_mutex_unlock(&mx->lock);
    if (UCS_PTR_IS_PTR(req)) return UCS_INPROGRESS;  /* ctx is freed by on_rma_done */
    free(ctx);
    return UCS_PTR_STATUS(req);
}

size_t mx_take(meshrt_ucx *mx, meshrt_events *queue, meshrt_event **out) {
    pthread_mutex_lock(&mx->lock);
    size_t n = queue->len;
    *out = queue->items;
    queue->items = NULL;
    queue->len = queue->cap = 0;
    pthread_mutex_unlock(&mx->lock);
    return n;
}
