/* meshrt._C: the one binding file. Thin wrappers only; the transports live in
 * ucx_transport.c and cuda_ipc.c, the typed Python face in meshrt/tensor/. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>

#include "cma_copy.h"
#include "spin_poll.h"
#include "ucx_transport.h"
#ifdef MESHRT_WITH_CUDA
#include "cuda_ipc.h"
#endif

static meshrt_ucx ucx;  /* one per process */
/* Set in a child forked while the parent had UCX open: UCX's global state (its async
 * thread among it) does not survive fork, so a worker opened here would hang. */
static int ucx_inherited = 0;

/* RuntimeError(message, status): Python tells a lost peer from a bug by the status. */
static PyObject *ucx_error(const char *what, ucs_status_t st) {
    PyObject *msg = PyUnicode_FromFormat("UCX %s failed: %s (status %d)", what,
                                         ucx.open ? ucx.api.status_string(st) : "transport closed", (int)st);
    if (msg != NULL) {
        PyObject *args = Py_BuildValue("(Ni)", msg, (int)st);
        if (args != NULL) {
            PyErr_SetObject(PyExc_RuntimeError, args);
            Py_DECREF(args);
        }
    }
    return NULL;
}

static int need_open(void) {
    if (!ucx.open) {
        PyErr_SetString(PyExc_RuntimeError, "the UCX transport is not open (call ucx_open first)");
        return 0;
    }
    return 1;
}

static PyObject *py_ucx_open(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (ucx.open) Py_RETURN_NONE;
    if (ucx_inherited) {
        PyErr_SetString(PyExc_OSError,
                        "UCX was open in this process's parent when it forked, and UCX cannot be used in "
                        "such a child; create TensorBuffers after forking, or start the process fresh");
        return NULL;
    }
    char err[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mx_open(&ucx, path, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_OSError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_ucx_close(PyObject *self, PyObject *noargs) {
    Py_BEGIN_ALLOW_THREADS
    mx_close(&ucx);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_ucx_is_open(PyObject *self, PyObject *noargs) { return PyBool_FromLong(ucx.open); }

static PyObject *py_ucx_address(PyObject *self, PyObject *noargs) {
    if (!need_open()) return NULL;
    return PyBytes_FromStringAndSize((const char *)ucx.address, (Py_ssize_t)ucx.address_len);
}

static PyObject *py_ucx_efd(PyObject *self, PyObject *noargs) {
    if (!need_open()) return NULL;
    return PyLong_FromLong(ucx.efd);
}

static PyObject *py_ucx_progress(PyObject *self, PyObject *noargs) {
    unsigned n;
    Py_BEGIN_ALLOW_THREADS
    n = mx_progress(&ucx);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(n);
}

static PyObject *py_ucx_arm(PyObject *self, PyObject *noargs) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mx_arm(&ucx);
    Py_END_ALLOW_THREADS
    if (rc < 0) return ucx_error("worker arm", (ucs_status_t)rc);
    return PyBool_FromLong(rc);
}

static PyObject *py_ucx_mem_map(PyObject *self, PyObject *args) {
    unsigned long long addr, len;
    int cuda;
    if (!PyArg_ParseTuple(args, "KKp", &addr, &len, &cuda)) return NULL;
    if (!need_open()) return NULL;
    ucp_mem_h memh;
    void *rkey;
    size_t rkey_len;
    ucs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mx_mem_map(&ucx, (void *)(uintptr_t)addr, (size_t)len, cuda, &memh, &rkey, &rkey_len);
    Py_END_ALLOW_THREADS
    if (st != UCS_OK) return ucx_error("memory registration", st);
    PyObject *packed = PyBytes_FromStringAndSize(rkey, (Py_ssize_t)rkey_len);
    mx_rkey_buffer_release(&ucx, rkey);
    if (packed == NULL) {
        mx_mem_unmap(&ucx, memh);
        return NULL;
    }
    return Py_BuildValue("(KN)", (unsigned long long)(uintptr_t)memh, packed);
}

static PyObject *py_ucx_mem_unmap(PyObject *self, PyObject *args) {
    unsigned long long memh;
    if (!PyArg_ParseTuple(args, "K", &memh)) return NULL;
    ucs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mx_mem_unmap(&ucx, (ucp_mem_h)(uintptr_t)memh);
    Py_END_ALLOW_THREADS
    if (st != UCS_OK) return ucx_error("memory deregistration", st);
    Py_RETURN_NONE;
}

static PyObject *py_ucx_ep_create(PyObject *self, PyObject *args) {
    Py_buffer address;
    if (!PyArg_ParseTuple(args, "y*", &address)) return NULL;
    if (!need_open()) {
        PyBuffer_Release(&address);
        return NULL;
    }
    ucp_ep_h ep;
    ucs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mx_ep_create(&ucx, address.buf, &ep);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&address);
    if (st != UCS_OK) return ucx_error("endpoint creation", st);
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)ep);
}

static PyObject *py_ucx_ep_close(PyObject *self, PyObject *args) {
    unsigned long long ep;
    if (!PyArg_ParseTuple(args, "K", &ep)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    mx_ep_close(&ucx, (ucp_ep_h)(uintptr_t)ep);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_ucx_rkey_unpack(PyObject *self, PyObject *args) {
    unsigned long long ep;
    Py_buffer rkey;
    if (!PyArg_ParseTuple(args, "Ky*", &ep, &rkey)) return NULL;
    if (!need_open()) {
        PyBuffer_Release(&rkey);
        return NULL;
    }
    ucp_rkey_h out;
    ucs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mx_rkey_unpack(&ucx, (ucp_ep_h)(uintptr_t)ep, rkey.buf, &out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&rkey);
    if (st != UCS_OK) return ucx_error("remote key unpack", st);
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)out);
}

static PyObject *py_ucx_rkey_destroy(PyObject *self, PyObject *args) {
    unsigned long long rkey;
    if (!PyArg_ParseTuple(args, "K", &rkey)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    mx_rkey_destroy(&ucx, (ucp_rkey_h)(uintptr_t)rkey);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* Returns 0 when done now, 1 when in flight (its token will come out of completions). */
static PyObject *rma(PyObject *args, int is_put) {
    unsigned long long ep, rkey, local, len, remote, token;
    int cuda;
    if (!PyArg_ParseTuple(args, "KKKKKKp", &ep, &rkey, &local, &len, &remote, &token, &cuda)) return NULL;
    if (!need_open()) return NULL;
    ucs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mx_rma(&ucx, is_put, (ucp_ep_h)(uintptr_t)ep, (ucp_rkey_h)(uintptr_t)rkey, (void *)(uintptr_t)local,
                (size_t)len, (uint64_t)remote, (uint64_t)token, cuda);
    Py_END_ALLOW_THREADS
    if (st == UCS_OK) return PyLong_FromLong(0);
    if (st == UCS_INPROGRESS) return PyLong_FromLong(1);
    return ucx_error(is_put ? "put" : "get", st);
}

static PyObject *py_ucx_get(PyObject *self, PyObject *args) { return rma(args, 0); }
static PyObject *py_ucx_put(PyObject *self, PyObject *args) { return rma(args, 1); }

static PyObject *events_list(meshrt_events *queue) {
    meshrt_event *items;
    size_t n;
    Py_BEGIN_ALLOW_THREADS
    n = mx_take(&ucx, queue, &items);
    Py_END_ALLOW_THREADS
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out != NULL && i < n; i++) {
        PyObject *t = Py_BuildValue("(Ki)", (unsigned long long)items[i].token, items[i].status);
        if (t == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    free(items);
    return out;
}

static PyObject *py_ucx_completions(PyObject *self, PyObject *noargs) { return events_list(&ucx.done); }
static PyObject *py_ucx_failed_endpoints(PyObject *self, PyObject *noargs) { return events_list(&ucx.failed); }

static PyObject *py_ucx_status_string(PyObject *self, PyObject *args) {
    int st;
    if (!PyArg_ParseTuple(args, "i", &st)) return NULL;
    if (!ucx.open) return PyUnicode_FromFormat("UCX status %d", st);
    return PyUnicode_FromString(ucx.api.status_string((ucs_status_t)st));
}

#ifdef MESHRT_WITH_CUDA
static PyObject *py_cuda_available(PyObject *self, PyObject *noargs) {
    char err[256] = "";
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = mc_cuda_init(err, sizeof(err));
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(is)", n, err);
}

static PyObject *py_cuda_ipc_export(PyObject *self, PyObject *args) {
    unsigned long long ptr, offset;
    int device, rc;
    unsigned char handle[MESHRT_IPC_HANDLE_BYTES];
    char err[256];
    if (!PyArg_ParseTuple(args, "K", &ptr)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_ipc_export(ptr, handle, (uint64_t *)&offset, &device, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "%s", err);
    return Py_BuildValue("(y#Ki)", handle, (Py_ssize_t)MESHRT_IPC_HANDLE_BYTES, offset, device);
}

static PyObject *py_cuda_ipc_open(PyObject *self, PyObject *args) {
    Py_buffer handle;
    int device, rc;
    unsigned long long base;
    char err[256];
    if (!PyArg_ParseTuple(args, "y*i", &handle, &device)) return NULL;
    if (handle.len != MESHRT_IPC_HANDLE_BYTES) {
        PyBuffer_Release(&handle);
        return PyErr_Format(PyExc_ValueError, "a CUDA IPC handle has %d bytes", MESHRT_IPC_HANDLE_BYTES);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = mc_ipc_open(handle.buf, device, (uint64_t *)&base, err, sizeof(err));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&handle);
    if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "%s", err);
    return PyLong_FromUnsignedLongLong(base);
}

static PyObject *py_cuda_ipc_close(PyObject *self, PyObject *args) {
    unsigned long long base;
    int device, rc;
    char err[256];
    if (!PyArg_ParseTuple(args, "Ki", &base, &device)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_ipc_close(base, device, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "%s", err);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_memcpy(PyObject *self, PyObject *args) {
    unsigned long long dst, src, n;
    int device, rc;
    char err[256];
    if (!PyArg_ParseTuple(args, "KKKi", &dst, &src, &n, &device)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_memcpy(dst, src, (size_t)n, device, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "%s", err);
    Py_RETURN_NONE;
}
#else
static PyObject *py_cuda_available(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("(is)", 0, "meshrt._C was built without CUDA (no CUDA toolkit at install; "
                                    "reinstall with one, or MESHRT_CUDA=1)");
}
#endif

static PyObject *py_cma_copy(PyObject *self, PyObject *args) {
    int pid, write, rc;
    unsigned long long local, remote, n;
    if (!PyArg_ParseTuple(args, "iKKKp", &pid, &local, &remote, &n, &write)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cma_copy((pid_t)pid, local, remote, (size_t)n, write);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *py_cma_read_bytes(PyObject *self, PyObject *args) {
    /* A new bytes object filled straight from another process's memory: the one copy
     * a bytes value needs, with no staging buffer (Python cannot fill a bytes itself). */
    int pid, parts, rc;
    unsigned long long remote, n;
    if (!PyArg_ParseTuple(args, "iKKi", &pid, &remote, &n, &parts)) return NULL;
    if (n > (unsigned long long)PY_SSIZE_T_MAX) return PyErr_Format(PyExc_OverflowError, "%llu bytes is too many", n);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (out == NULL) return NULL;
    char *dst = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    rc = cma_read_split((pid_t)pid, (uint64_t)(uintptr_t)dst, remote, (size_t)n, parts);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        Py_DECREF(out);
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return out;
}

static PyObject *py_spin_poll(PyObject *self, PyObject *args) {
    /* Without the GIL for the whole wait: the process's other threads run meanwhile. */
    PyObject *seq;
    long long ns;
    int fds[SPIN_POLL_MAX_FDS], rc;
    if (!PyArg_ParseTuple(args, "OL", &seq, &ns)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "spin_poll: fds must be a sequence of ints");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > SPIN_POLL_MAX_FDS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "spin_poll: at most %d descriptors", SPIN_POLL_MAX_FDS);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (fd == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
        if (fd < 0 || fd > INT_MAX) {
            Py_DECREF(fast);
            return PyErr_Format(PyExc_ValueError, "spin_poll: %ld is not a descriptor", fd);
        }
        fds[i] = (int)fd;
    }
    Py_DECREF(fast);
    if (ns < 0) ns = 0;
    if (ns > 10000000000LL) ns = 10000000000LL; /* (10 s: no overflow of the deadline) */
    Py_BEGIN_ALLOW_THREADS
    rc = spin_poll(fds, (int)n, (int64_t)ns);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(rc);
}

static PyObject *py_build_info(PyObject *self, PyObject *noargs) {
#ifdef MESHRT_WITH_CUDA
    int cuda = 1;
#else
    int cuda = 0;
#endif
    return Py_BuildValue("{s:O,s:s}", "cuda", cuda ? Py_True : Py_False, "ucx_api",
                         UCP_API_MAJOR == 1 ? "1." Py_STRINGIFY(UCP_API_MINOR) : "?");
}

static PyMethodDef methods[] = {
    {"ucx_open", py_ucx_open, METH_VARARGS, "Load libucp from a path and open this process's worker."},
    {"ucx_close", py_ucx_close, METH_NOARGS, "Destroy the worker and context."},
    {"ucx_is_open", py_ucx_is_open, METH_NOARGS, NULL},
    {"ucx_address", py_ucx_address, METH_NOARGS, "This worker's address (for peers' endpoints)."},
    {"ucx_efd", py_ucx_efd, METH_NOARGS, "The worker's event fd (readable when progress is due)."},
    {"ucx_progress", py_ucx_progress, METH_NOARGS, NULL},
    {"ucx_arm", py_ucx_arm, METH_NOARGS, "True: armed, sleep on the fd; False: progress again."},
    {"ucx_mem_map", py_ucx_mem_map, METH_VARARGS, "Register memory: (memh, packed remote key)."},
    {"ucx_mem_unmap", py_ucx_mem_unmap, METH_VARARGS, NULL},
    {"ucx_ep_create", py_ucx_ep_create, METH_VARARGS, NULL},
    {"ucx_ep_close", py_ucx_ep_close, METH_VARARGS, NULL},
    {"ucx_rkey_unpack", py_ucx_rkey_unpack, METH_VARARGS, NULL},
    {"ucx_rkey_destroy", py_ucx_rkey_destroy, METH_VARARGS, NULL},
    {"ucx_get", py_ucx_get, METH_VARARGS, "One-sided read: 0 done now, 1 in flight."},
    {"ucx_put", py_ucx_put, METH_VARARGS, "One-sided write, complete at the owner: 0 done now, 1 in flight."},
    {"ucx_completions", py_ucx_completions, METH_NOARGS, "[(token, status)] finished since last asked."},
    {"ucx_failed_endpoints", py_ucx_failed_endpoints, METH_NOARGS, "[(endpoint, status)] that lost their peer."},
    {"ucx_status_string", py_ucx_status_string, METH_VARARGS, NULL},
    {"cuda_available", py_cuda_available, METH_NOARGS, "(number of GPUs, why none)."},
#ifdef MESHRT_WITH_CUDA
    {"cuda_ipc_export", py_cuda_ipc_export, METH_VARARGS, "(handle, offset, device) of a CUDA pointer."},
    {"cuda_ipc_open", py_cuda_ipc_open, METH_VARARGS, "Map a peer's allocation: its base pointer here."},
    {"cuda_ipc_close", py_cuda_ipc_close, METH_VARARGS, NULL},
    {"cuda_memcpy", py_cuda_memcpy, METH_VARARGS, "Synchronous copy between CUDA-known addresses."},
#endif
    {"cma_copy", py_cma_copy, METH_VARARGS, "Copy to/from another process of this machine (pid, local, remote, n, write)."},
    {"cma_read_bytes", py_cma_read_bytes, METH_VARARGS, "A new bytes read from another process of this machine (pid, remote, n, parts)."},
    {"spin_poll", py_spin_poll, METH_VARARGS, "Poll (fds, ns) without sleeping, yielding between looks: a mask of the ready ones, 0 if none."},
    {"build_info", py_build_info, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "meshrt._C", "meshrt's C transports.", -1, methods};

static void forget_ucx_in_child(void) {
    if (ucx.open) ucx_inherited = 1;
    mx_forget_after_fork(&ucx);
}

PyMODINIT_FUNC PyInit__C(void) {
    pthread_atfork(NULL, NULL, forget_ucx_in_child);
    return PyModule_Create(&module);
}
