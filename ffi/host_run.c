/* xla_gpu.runtime._host_run: one execution of a cpu-target program in one
 * call from Python, the per-run work of `ProgramExecutable.run` done in C.
 *
 * Python spends 20-40 us a run of a small program on work that repeats
 * unchanged: checking each argument's type, shape and dtype, taking its
 * address, handing out the temp and output buffers, building the ctypes
 * array of allocation addresses, calling the thunk executor through ctypes,
 * and making the output arrays. For programs whose kernels take 10-50 us
 * that decided whether a run was faster than XLA:CPU's. A `HostRun` holds
 * what `_CpuRunPlan` works out once (as plain C data) and its call does the
 * rest:
 *
 *   - every argument must be exactly a numpy array of its parameter's shape
 *     and storage dtype, C-contiguous, non-empty and, when the program reads
 *     it in place, 16-byte aligned; anything else returns NotImplemented and
 *     the Python path runs instead (it converts, copies, or reports the
 *     error with the argument's name);
 *   - temp, output and copied-parameter allocations come from a pool kept
 *     per allocation, as `HostBufferPool` does it: a buffer is handed out
 *     again only once nothing but the pool refers to it (the caller dropped
 *     the outputs made from it, and every view of them), which the
 *     reference counts say; a run holds a reference to each buffer it uses,
 *     so concurrent runs on other threads never share one;
 *   - XLA_GPU_DEBUG_FILL=<byte> fills temps and outputs before the run, as
 *     the Python path does (a value it cannot read simply defers to Python,
 *     which reports it);
 *   - `XlaGpuHostExecute` (ffi/host_executor.cc, passed in as an address)
 *     runs the command stream with the GIL released; a program with thunks
 *     that must run from Python never gets a HostRun;
 *   - the results are the pool's typed output arrays themselves, or views
 *     (copies where the allocation is shared) with the output's logical
 *     dims and strides;
 *   - a donated argument (the caller's per-call flags: `donated=` of the
 *     call, or the C entry's flags array) whose parameter allocation the
 *     program writes, which holds that parameter alone and which one output
 *     at most reads, is written in place when its array is writeable and
 *     64-byte aligned (what the pool's buffers give the kernels): no pooled
 *     buffer, no copy in, and the output read from that allocation is the
 *     argument's array itself (or a view of it). Buffer assignment gave the
 *     program that allocation to write (the input/output alias), so the
 *     results are those of the copying run; the caller promises that
 *     nothing else reads the array (it is consumed). Anything else about a
 *     donated argument (misaligned, read-only) is copied as before.
 *
 * Written against the stable ABI (Py_LIMITED_API 3.11) and numpy's C API,
 * so one build serves every CPython from 3.11 on.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL xla_gpu_host_run_ARRAY_API
#include <numpy/arrayobject.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Buffers kept per allocation (HostBufferPool's default). */
#define POOL_KEEP 4
/* Pool buffers start on this boundary (spec.POOL_ALIGNMENT). */
#define POOL_ALIGNMENT 64
/* Arguments read in place must be aligned this much (the kernels' vector
 * loads assume it; the Python path copies others). */
#define ARGUMENT_ALIGNMENT 16
/* A donated argument written in place must start where a pooled buffer
 * would (program.py's _ALIGNMENT), so the kernels see what a copying run
 * gives them. */
#define DONATED_ALIGNMENT POOL_ALIGNMENT
/* Counters of XlaGpuHostExecute (kNumStats). */
#define NUM_COUNTERS 8
/* Allocations handled without a heap array for the run's addresses. */
#define STACK_ALLOCATIONS 64

/* What may stop a run: XlaGpuHostControl of ffi/host_executor.cc. */
typedef struct {
  int (*poll)(void *arg);
  void *arg;
  int64_t deadline_ns;
} Control;

typedef int64_t (*Executor)(const int64_t *code, int64_t length, char *const *bases,
                            int64_t num_bases, void *const *kernels, int64_t num_kernels,
                            int64_t *probes, int64_t num_probes, int (*callback)(int64_t),
                            int64_t *stats, int64_t *error_at, const Control *control);

/* XlaGpuHostExecute's result codes (host_executor.cc). */
#define EXECUTE_INTERRUPTED 3
#define EXECUTE_DEADLINE_EXCEEDED 4

/* The executor's poll, between iterations of a while loop: runs Python's
 * signal handlers (Ctrl-C's KeyboardInterrupt) with the GIL taken for the
 * moment; nonzero stops the run. What a handler raised is kept per thread
 * until `restore_pending()` sets it again: the executor may run under
 * ctypes, which must not find an exception set when the foreign call
 * returns. (A poll written in Python cannot do this: the handler's
 * exception is raised on entry to the callback, before any `try`, and
 * ctypes swallows it.) */
static _Thread_local PyObject *pending_type, *pending_value, *pending_traceback;

static int poll_signals(void *unused) {
  (void)unused;
  PyGILState_STATE state = PyGILState_Ensure();
  int stop = PyErr_CheckSignals() != 0;
  if (stop) {
    Py_CLEAR(pending_type);
    Py_CLEAR(pending_value);
    Py_CLEAR(pending_traceback);
    PyErr_Fetch(&pending_type, &pending_value, &pending_traceback);
  }
  PyGILState_Release(state);
  return stop;
}

/* Sets what the last poll on this thread kept as the current exception;
 * 0 when there was none. */
static int restore_pending(void) {
  if (pending_type == NULL) return 0;
  PyErr_Restore(pending_type, pending_value, pending_traceback);
  pending_type = pending_value = pending_traceback = NULL;
  return 1;
}

static PyObject *host_run_poll_address(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return PyLong_FromVoidPtr((void *)poll_signals);
}

static PyObject *host_run_raise_pending(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  if (restore_pending()) return NULL;
  Py_RETURN_NONE;
}

static PyObject *host_run_call_address(PyObject *module, PyObject *unused);
static PyObject *host_run_call_donated_address(PyObject *module, PyObject *unused);

static PyMethodDef module_functions[] = {
    {"poll_address", host_run_poll_address, METH_NOARGS,
     "The address of an XlaGpuHostControl poll for ctypes callers: it runs Python's "
     "signal handlers and keeps what they raise for raise_pending()."},
    {"call_address", host_run_call_address, METH_NOARGS,
     "The address of the C entry that runs a HostRun on an array of arguments "
     "(int (*)(HostRun *, PyObject *const *, Py_ssize_t, PyObject **, Py_ssize_t); "
     "for the PJRT plugin's Execute)."},
    {"call_donated_address", host_run_call_donated_address, METH_NOARGS,
     "The address of call_address's entry with per-argument donation flags "
     "(..., const unsigned char *donated): a donated argument the program writes is "
     "written in place and becomes its aliased output."},
    {"raise_pending", host_run_raise_pending, METH_NOARGS,
     "Raises (and forgets) what a signal handler raised during this thread's last "
     "poll; returns None when nothing did."},
    {NULL, NULL, 0, NULL},
};

typedef struct {
  int ndim;
  npy_intp dims[NPY_MAXDIMS];
} Shape;

/* One pooled buffer: `raw` owns the bytes, `typed` (or NULL) is the output
 * array over them that a run returns. */
typedef struct {
  PyObject *raw;
  PyObject *typed;
  char *data;
} Entry;

/* A temp, output or copied-parameter allocation. */
typedef struct {
  Py_ssize_t allocation;
  Py_ssize_t size;
  int fill;               /* filled with XLA_GPU_DEBUG_FILL (temps, outputs) */
  int zero;               /* zeroed before the parameters are copied in */
  Py_ssize_t slot;        /* the result slot of its typed array, or -1 */
  PyArray_Descr *descr;   /* the typed array's dtype, or NULL */
  Shape shape;
  Py_ssize_t parameter;   /* the donatable parameter copied into it, or -1 */
  int count;
  Entry entries[POOL_KEEP];
} Pool;

/* One argument: read in place (its allocation's base) or copied to
 * `offset` of its allocation's pooled buffer. */
typedef struct {
  Py_ssize_t allocation;
  int in_place;
  Py_ssize_t offset;
  Py_ssize_t nbytes;
  PyArray_Descr *descr;
  Shape shape;
  /* Written in place when donated: the program writes its allocation,
   * which holds it alone (offset 0, the allocation's size) and which one
   * output at most reads (the plan decides; see _CpuRunPlan). */
  int donatable;
} Parameter;

/* An output returned as a view of (or, when `copy`, a copy from) its
 * allocation. */
typedef struct {
  Py_ssize_t slot;
  Py_ssize_t allocation;
  Py_ssize_t offset;
  int copy;
  PyArray_Descr *descr;
  Shape shape;
  npy_intp strides[NPY_MAXDIMS];
  /* The donatable parameter whose allocation it reads, or -1; `whole`:
   * the view is that argument's array as it is (returned itself). */
  Py_ssize_t parameter;
  int whole;
} View;

typedef struct {
  PyObject_HEAD
  Executor executor;
  const int64_t *code;
  int64_t length;
  void *const *kernels;
  int64_t num_kernels;
  int64_t *probes;         /* the split kernels' probe slots */
  int64_t num_probes;
  PyObject *keep;          /* what `code`, `kernels`, `probes` and the constants live in */
  PyObject *error_type;    /* raised when the executor refuses the code */
  Py_ssize_t num_allocations;
  char **static_bases;     /* constants; NULL elsewhere */
  PyObject **static_owners;
  Py_ssize_t num_parameters;
  Parameter *parameters;
  Py_ssize_t num_pools;
  Pool *pools;
  Py_ssize_t num_views;
  View *views;
  Py_ssize_t num_outputs;
  int64_t counters[NUM_COUNTERS];   /* of the last run */
} HostRun;

/* -- building -------------------------------------------------------------- */

static int read_shape(PyObject *seq, Shape *shape, npy_intp *strides_out, PyObject *strides) {
  Py_ssize_t n = PySequence_Size(seq);
  if (n < 0) return -1;
  if (n > NPY_MAXDIMS) {
    PyErr_SetString(PyExc_ValueError, "too many dimensions");
    return -1;
  }
  shape->ndim = (int)n;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *item = PySequence_GetItem(seq, i);
    if (item == NULL) return -1;
    shape->dims[i] = (npy_intp)PyLong_AsSsize_t(item);
    Py_DECREF(item);
    if (shape->dims[i] < 0 && PyErr_Occurred()) return -1;
    if (strides_out != NULL) {
      item = PySequence_GetItem(strides, i);
      if (item == NULL) return -1;
      strides_out[i] = (npy_intp)PyLong_AsSsize_t(item);
      Py_DECREF(item);
      if (strides_out[i] == -1 && PyErr_Occurred()) return -1;
    }
  }
  return 0;
}

static int read_descr(PyObject *obj, PyArray_Descr **out) {
  if (obj == Py_None) {
    *out = NULL;
    return 0;
  }
  if (!PyArray_DescrCheck(obj)) {
    PyErr_SetString(PyExc_TypeError, "expected a numpy dtype");
    return -1;
  }
  Py_INCREF(obj);
  *out = (PyArray_Descr *)obj;
  return 0;
}

static int check_allocation(HostRun *self, Py_ssize_t allocation) {
  if (allocation < 0 || allocation >= self->num_allocations) {
    PyErr_Format(PyExc_ValueError, "allocation %zd out of range", allocation);
    return -1;
  }
  return 0;
}

static void host_run_dealloc(PyObject *obj) {
  HostRun *self = (HostRun *)obj;
  for (Py_ssize_t i = 0; i < self->num_pools; ++i) {
    Pool *p = &self->pools[i];
    for (int k = 0; k < p->count; ++k) {
      Py_XDECREF(p->entries[k].typed);
      Py_XDECREF(p->entries[k].raw);
    }
    Py_XDECREF(p->descr);
  }
  for (Py_ssize_t i = 0; i < self->num_parameters; ++i) Py_XDECREF(self->parameters[i].descr);
  for (Py_ssize_t i = 0; i < self->num_views; ++i) Py_XDECREF(self->views[i].descr);
  PyMem_Free(self->pools);
  PyMem_Free(self->parameters);
  PyMem_Free(self->views);
  PyMem_Free(self->static_bases);
  PyMem_Free(self->static_owners);
  Py_XDECREF(self->keep);
  Py_XDECREF(self->error_type);
  PyTypeObject *type = Py_TYPE(obj);
  freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
  free_fn(obj);
  Py_DECREF(type);
}

static int c_contiguous(const Shape *shape, const npy_intp *strides, npy_intp itemsize);
static npy_intp descr_itemsize(PyArray_Descr *descr);

/* Ties each donatable parameter to the pooled buffer it is copied into and
 * to the output view that reads its allocation. A parameter that is not
 * alone in a copied allocation of its own size, or whose allocation two
 * outputs read (they would share the argument's memory), is not
 * donatable. */
static int link_donatable(HostRun *self) {
  for (Py_ssize_t i = 0; i < self->num_pools; ++i) self->pools[i].parameter = -1;
  for (Py_ssize_t i = 0; i < self->num_views; ++i) self->views[i].parameter = -1;
  for (Py_ssize_t i = 0; i < self->num_parameters; ++i) {
    Parameter *p = &self->parameters[i];
    if (!p->donatable) continue;
    p->donatable = 0;
    if (p->in_place || p->offset != 0) continue;
    Py_ssize_t pool = -1, view = -1, sharing = 0, views = 0;
    for (Py_ssize_t j = 0; j < self->num_parameters; ++j)
      sharing += self->parameters[j].allocation == p->allocation;
    for (Py_ssize_t j = 0; j < self->num_pools; ++j)
      if (self->pools[j].allocation == p->allocation) pool = j;
    for (Py_ssize_t j = 0; j < self->num_views; ++j)
      if (self->views[j].allocation == p->allocation) view = j, ++views;
    if (sharing != 1 || pool < 0 || views > 1 || self->pools[pool].size != p->nbytes ||
        self->pools[pool].slot >= 0)
      continue;
    p->donatable = 1;
    self->pools[pool].parameter = i;
    if (view >= 0) {
      View *v = &self->views[view];
      v->parameter = i;
      npy_intp itemsize = descr_itemsize(v->descr);
      if (itemsize < 0) return -1;
      int same = v->offset == 0 && v->shape.ndim == p->shape.ndim &&
                 PyArray_EquivTypes(v->descr, p->descr) &&
                 c_contiguous(&v->shape, v->strides, itemsize);
      for (int d = 0; same && d < v->shape.ndim; ++d)
        same = v->shape.dims[d] == p->shape.dims[d];
      v->whole = same;
    }
  }
  return 0;
}

/* HostRun(executor, code, length, kernels, num_kernels, probes, num_probes,
 *         keep, error_type,
 *         num_allocations, constants, parameters, pools, views, num_outputs)
 *   constants:  [(allocation, array)]
 *   parameters: [(allocation, in_place, offset, nbytes, dtype, shape[, donatable])]
 *   pools:      [(allocation, size, fill, zero, slot, dtype | None, shape)]
 *   views:      [(slot, allocation, offset, copy, dtype, shape, strides)]
 * Addresses are ints; `keep` holds the objects they point into. */
static PyObject *host_run_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  unsigned long long executor, code, kernels, probes;
  long long length, num_kernels, num_probes;
  Py_ssize_t num_allocations, num_outputs;
  PyObject *keep, *error_type, *constants, *parameters, *pools, *views;
  if (kwargs != NULL && PyDict_Size(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "HostRun takes no keyword arguments");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "KKLKLKLOOnOOOOn", &executor, &code, &length, &kernels,
                        &num_kernels, &probes, &num_probes, &keep, &error_type,
                        &num_allocations, &constants, &parameters, &pools, &views,
                        &num_outputs))
    return NULL;
  if (executor == 0 || code == 0 || length < 0 || num_kernels < 0 || num_probes < 0 ||
      (num_probes > 0 && probes == 0) || num_allocations < 0 || num_outputs < 0) {
    PyErr_SetString(PyExc_ValueError, "HostRun: bad executor, code or counts");
    return NULL;
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  HostRun *self = (HostRun *)alloc(type, 0);
  if (self == NULL) return NULL;
  self->executor = (Executor)(uintptr_t)executor;
  self->code = (const int64_t *)(uintptr_t)code;
  self->length = length;
  self->kernels = (void *const *)(uintptr_t)kernels;
  self->num_kernels = num_kernels;
  self->probes = (int64_t *)(uintptr_t)probes;
  self->num_probes = num_probes;
  Py_INCREF(keep);
  self->keep = keep;
  Py_INCREF(error_type);
  self->error_type = error_type;
  self->num_allocations = num_allocations;
  self->num_outputs = num_outputs;
  self->static_bases = PyMem_Calloc((size_t)num_allocations + 1, sizeof(char *));
  self->static_owners = PyMem_Calloc((size_t)num_allocations + 1, sizeof(PyObject *));
  Py_ssize_t np_ = PySequence_Size(parameters), nq = PySequence_Size(pools),
             nv = PySequence_Size(views), nc = PySequence_Size(constants);
  if (np_ < 0 || nq < 0 || nv < 0 || nc < 0) goto fail;
  self->parameters = PyMem_Calloc((size_t)np_ + 1, sizeof(Parameter));
  self->pools = PyMem_Calloc((size_t)nq + 1, sizeof(Pool));
  self->views = PyMem_Calloc((size_t)nv + 1, sizeof(View));
  if (!self->static_bases || !self->static_owners || !self->parameters || !self->pools ||
      !self->views) {
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t i = 0; i < nc; ++i) {
    PyObject *item = PySequence_GetItem(constants, i);
    Py_ssize_t allocation;
    PyObject *array;
    int ok = item != NULL && PyArg_ParseTuple(item, "nO", &allocation, &array);
    Py_XDECREF(item);   /* `keep` holds the array */
    if (!ok || check_allocation(self, allocation) < 0) goto fail;
    if (!PyArray_Check(array)) {
      PyErr_SetString(PyExc_TypeError, "a constant is not a numpy array");
      goto fail;
    }
    self->static_bases[allocation] = PyArray_DATA((PyArrayObject *)array);
    self->static_owners[allocation] = array;
  }
  for (Py_ssize_t i = 0; i < np_; ++i) {
    Parameter *p = &self->parameters[i];
    PyObject *item = PySequence_GetItem(parameters, i), *dtype, *shape;
    int ok = item != NULL && PyArg_ParseTuple(item, "npnnOO|p", &p->allocation, &p->in_place,
                                              &p->offset, &p->nbytes, &dtype, &shape,
                                              &p->donatable);
    ok = ok && check_allocation(self, p->allocation) == 0 && p->offset >= 0 &&
         p->nbytes >= 0 && read_descr(dtype, &p->descr) == 0 && p->descr != NULL &&
         read_shape(shape, &p->shape, NULL, NULL) == 0;
    Py_XDECREF(item);
    self->num_parameters = i + 1;
    if (!ok) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad parameter");
      goto fail;
    }
  }
  for (Py_ssize_t i = 0; i < nq; ++i) {
    Pool *p = &self->pools[i];
    PyObject *item = PySequence_GetItem(pools, i), *dtype, *shape;
    int ok = item != NULL && PyArg_ParseTuple(item, "nnppnOO", &p->allocation, &p->size,
                                              &p->fill, &p->zero, &p->slot, &dtype, &shape);
    ok = ok && check_allocation(self, p->allocation) == 0 && p->size >= 0 &&
         p->slot < num_outputs && read_descr(dtype, &p->descr) == 0 &&
         read_shape(shape, &p->shape, NULL, NULL) == 0;
    Py_XDECREF(item);
    self->num_pools = i + 1;
    if (!ok) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad pooled allocation");
      goto fail;
    }
  }
  for (Py_ssize_t i = 0; i < nv; ++i) {
    View *v = &self->views[i];
    PyObject *item = PySequence_GetItem(views, i), *dtype, *shape, *strides;
    int ok = item != NULL && PyArg_ParseTuple(item, "nnnpOOO", &v->slot, &v->allocation,
                                              &v->offset, &v->copy, &dtype, &shape, &strides);
    ok = ok && check_allocation(self, v->allocation) == 0 && v->slot >= 0 &&
         v->slot < num_outputs && read_descr(dtype, &v->descr) == 0 && v->descr != NULL &&
         read_shape(shape, &v->shape, v->strides, strides) == 0;
    Py_XDECREF(item);
    self->num_views = i + 1;
    if (!ok) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad output view");
      goto fail;
    }
  }
  if (link_donatable(self) < 0) goto fail;
  return (PyObject *)self;
fail:
  Py_DECREF(self);
  return NULL;
}

/* -- running --------------------------------------------------------------- */

static int entry_is_free(const Entry *e) {
  if (e->typed != NULL) return Py_REFCNT(e->typed) == 1 && Py_REFCNT(e->raw) == 2;
  return Py_REFCNT(e->raw) == 1;
}

/* A buffer of `p` for this run, with a reference the run holds (released
 * by release_entry). */
static int take_entry(Pool *p, Entry *out) {
  for (int k = 0; k < p->count; ++k) {
    if (entry_is_free(&p->entries[k])) {
      *out = p->entries[k];
      Py_INCREF(out->raw);
      Py_XINCREF(out->typed);
      return 0;
    }
  }
  npy_intp bytes = (npy_intp)p->size + POOL_ALIGNMENT;
  PyObject *raw = PyArray_SimpleNew(1, &bytes, NPY_UINT8);
  if (raw == NULL) return -1;
  uintptr_t start = (uintptr_t)PyArray_DATA((PyArrayObject *)raw);
  char *data = (char *)((start + POOL_ALIGNMENT - 1) & ~(uintptr_t)(POOL_ALIGNMENT - 1));
  PyObject *typed = NULL;
  if (p->descr != NULL) {
    Py_INCREF(p->descr);   /* stolen */
    typed = PyArray_NewFromDescr(&PyArray_Type, p->descr, p->shape.ndim, p->shape.dims, NULL,
                                 data, NPY_ARRAY_CARRAY, NULL);
    if (typed == NULL) {
      Py_DECREF(raw);
      return -1;
    }
    Py_INCREF(raw);        /* stolen */
    if (PyArray_SetBaseObject((PyArrayObject *)typed, raw) < 0) {
      Py_DECREF(typed);
      Py_DECREF(raw);
      return -1;
    }
  }
  out->raw = raw;
  out->typed = typed;
  out->data = data;
  if (p->count < POOL_KEEP) {
    /* The pool's own references; `out` keeps the ones just made. */
    p->entries[p->count++] = *out;
    Py_INCREF(raw);
    Py_XINCREF(typed);
  }
  return 0;
}

static void release_entry(Entry *e) {
  Py_XDECREF(e->typed);
  Py_XDECREF(e->raw);
}

/* XLA_GPU_DEBUG_FILL as a byte: -1 unset, -2 a value Python must judge. */
static int debug_fill(void) {
  const char *text = getenv("XLA_GPU_DEBUG_FILL");
  if (text == NULL || text[0] == '\0') return -1;
  int base = 10;
  const char *digits = text;
  if (text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    digits = text + 2;
  } else if (text[0] == '0' && text[1] != '\0') {
    return -2;   /* Python's int(..., 0) has its own rules for these */
  }
  if (*digits == '\0') return -2;
  char *end;
  long value = strtol(digits, &end, base);
  if (*end != '\0' || digits[0] == '-' || digits[0] == '+' || value < 0 || value > 255)
    return -2;
  return (int)value;
}

static int argument_matches(const Parameter *p, PyObject *arg) {
  if (!PyArray_CheckExact(arg)) return 0;
  PyArrayObject *array = (PyArrayObject *)arg;
  if (PyArray_NDIM(array) != p->shape.ndim) return 0;
  const npy_intp *dims = PyArray_DIMS(array);
  for (int d = 0; d < p->shape.ndim; ++d)
    if (dims[d] != p->shape.dims[d]) return 0;
  PyArray_Descr *descr = PyArray_DESCR(array);
  if (descr != p->descr && !PyArray_EquivTypes(descr, p->descr)) return 0;
  if (!PyArray_IS_C_CONTIGUOUS(array) || p->nbytes == 0) return 0;
  if (p->in_place && ((uintptr_t)PyArray_DATA(array)) % ARGUMENT_ALIGNMENT != 0) return 0;
  return 1;
}

/* Whether donated argument `i` is written in place in this run (see the
 * top of the file); `argument_matches` has accepted it. */
static int written_in_place(const HostRun *self, Py_ssize_t i, PyObject *const *args,
                            const unsigned char *donated) {
  if (donated == NULL || !donated[i] || !self->parameters[i].donatable) return 0;
  PyArrayObject *array = (PyArrayObject *)args[i];
  return PyArray_ISWRITEABLE(array) &&
         ((uintptr_t)PyArray_DATA(array)) % DONATED_ALIGNMENT == 0;
}

static PyObject *make_view(const View *v, char *base, PyObject *owner, int copy) {
  Py_INCREF(v->descr);   /* stolen */
  PyObject *view = PyArray_NewFromDescr(&PyArray_Type, v->descr, v->shape.ndim, v->shape.dims,
                                        (npy_intp *)v->strides, base + v->offset,
                                        NPY_ARRAY_WRITEABLE, NULL);
  if (view == NULL) return NULL;
  if (copy) {
    PyObject *copy = PyArray_NewCopy((PyArrayObject *)view, NPY_KEEPORDER);
    Py_DECREF(view);
    return copy;
  }
  Py_INCREF(owner);      /* stolen */
  if (PyArray_SetBaseObject((PyArrayObject *)view, owner) < 0) {
    Py_DECREF(owner);
    Py_DECREF(view);
    return NULL;
  }
  return view;
}

/* xla_gpu.errors.DeadlineExceededError, set as the current exception. */
static void raise_deadline_exceeded(void) {
  PyObject *errors = PyImport_ImportModule("xla_gpu.errors");
  PyObject *type = errors ? PyObject_GetAttrString(errors, "DeadlineExceededError") : NULL;
  Py_XDECREF(errors);
  if (type == NULL) return;
  PyErr_SetNone(type);   /* its default message */
  Py_DECREF(type);
}

/* One run of `self` on `args` (`nargs` of them): 0 with a new reference
 * to every output in `results` (num_outputs of them), 1 when an argument is
 * not what the C path reads (nothing ran, nothing set), -1 with an
 * exception set when the run failed. */
static int run_arrays(HostRun *self, PyObject *const *args, Py_ssize_t nargs,
                      const Control *control, const unsigned char *donated,
                      PyObject **results) {
  if (nargs != self->num_parameters) return 1;
  for (Py_ssize_t i = 0; i < self->num_parameters; ++i)
    if (!argument_matches(&self->parameters[i], args[i])) return 1;
  int fill = debug_fill();
  if (fill == -2) return 1;

  Py_ssize_t n = self->num_allocations;
  char *stack_bases[STACK_ALLOCATIONS];
  PyObject *stack_owners[STACK_ALLOCATIONS];
  Entry stack_held[STACK_ALLOCATIONS];
  char **bases = stack_bases;
  PyObject **owners = stack_owners;
  Entry *held = stack_held;
  int status = -1;
  Py_ssize_t taken = 0;
  for (Py_ssize_t i = 0; i < self->num_outputs; ++i) results[i] = NULL;
  if (n > STACK_ALLOCATIONS || self->num_pools > STACK_ALLOCATIONS) {
    bases = PyMem_Malloc(sizeof(char *) * (size_t)(n + 1));
    owners = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + 1));
    held = PyMem_Malloc(sizeof(Entry) * (size_t)(self->num_pools + 1));
    if (!bases || !owners || !held) {
      PyErr_NoMemory();
      goto done;
    }
  }
  memcpy(bases, self->static_bases, sizeof(char *) * (size_t)n);
  memcpy(owners, self->static_owners, sizeof(PyObject *) * (size_t)n);

  for (Py_ssize_t i = 0; i < self->num_pools; ++i) {
    Pool *p = &self->pools[i];
    if (p->parameter >= 0 && written_in_place(self, p->parameter, args, donated)) {
      /* The donated argument is the allocation: no pooled buffer. */
      PyObject *arg = args[p->parameter];
      held[i].raw = held[i].typed = NULL;
      held[i].data = NULL;
      taken = i + 1;
      bases[p->allocation] = PyArray_DATA((PyArrayObject *)arg);
      owners[p->allocation] = arg;
      continue;
    }
    if (take_entry(p, &held[i]) < 0) goto done;
    taken = i + 1;
    bases[p->allocation] = held[i].data;
    owners[p->allocation] = held[i].raw;
    if (p->fill && fill >= 0) memset(held[i].data, fill, (size_t)p->size);
    else if (p->zero) memset(held[i].data, 0, (size_t)p->size);
  }
  for (Py_ssize_t i = 0; i < self->num_parameters; ++i) {
    const Parameter *p = &self->parameters[i];
    PyObject *arg = args[i];
    char *data = PyArray_DATA((PyArrayObject *)arg);
    if (p->in_place) {
      bases[p->allocation] = data;
      owners[p->allocation] = arg;
    } else if (!written_in_place(self, i, args, donated)) {
      memcpy(bases[p->allocation] + p->offset, data, (size_t)p->nbytes);
    }
  }

  int64_t counters[NUM_COUNTERS] = {0};
  int64_t error_at = -1, rc;
  Py_BEGIN_ALLOW_THREADS
  rc = self->executor(self->code, self->length, bases, (int64_t)n, self->kernels,
                      self->num_kernels, self->probes, self->num_probes, NULL, counters,
                      &error_at, control);
  Py_END_ALLOW_THREADS
  memcpy(self->counters, counters, sizeof(counters));
  if (rc == EXECUTE_INTERRUPTED && restore_pending()) goto done;
  if (rc == EXECUTE_DEADLINE_EXCEEDED) {
    raise_deadline_exceeded();
    goto done;
  }
  if (rc != 0) {
    PyErr_Format(self->error_type,
                 "the native thunk executor refused command word %lld of the program "
                 "(code %lld)", (long long)error_at, (long long)rc);
    goto done;
  }

  for (Py_ssize_t i = 0; i < self->num_pools; ++i) {
    const Pool *p = &self->pools[i];
    if (p->slot >= 0) {
      Py_INCREF(held[i].typed);
      Py_XDECREF(results[p->slot]);
      results[p->slot] = held[i].typed;
    }
  }
  for (Py_ssize_t i = 0; i < self->num_views; ++i) {
    const View *v = &self->views[i];
    PyObject *view;
    if (v->parameter >= 0 && written_in_place(self, v->parameter, args, donated)) {
      /* The output is the donated argument's memory (XLA's aliased output
       * buffer): the array itself where the output is exactly it. */
      PyObject *arg = args[v->parameter];
      if (v->whole) {
        Py_INCREF(arg);
        view = arg;
      } else {
        view = make_view(v, PyArray_DATA((PyArrayObject *)arg), arg, 0);
      }
    } else {
      view = make_view(v, bases[v->allocation], owners[v->allocation], v->copy);
    }
    if (view == NULL) goto done;
    Py_XDECREF(results[v->slot]);
    results[v->slot] = view;
  }
  for (Py_ssize_t i = 0; i < self->num_outputs; ++i) {
    if (results[i] == NULL) {
      PyErr_Format(self->error_type, "the C run path made no array for output %zd", i);
      goto done;
    }
  }
  status = 0;

done:
  if (status != 0)
    for (Py_ssize_t i = 0; i < self->num_outputs; ++i) Py_CLEAR(results[i]);
  for (Py_ssize_t i = 0; i < taken; ++i) release_entry(&held[i]);
  if (bases != stack_bases) {
    PyMem_Free(bases);
    PyMem_Free(owners);
    PyMem_Free(held);
  }
  return status;
}

static PyObject *host_run_call(PyObject *obj, PyObject *args, PyObject *kwargs) {
  HostRun *self = (HostRun *)obj;
  /* deadline_ns=<CLOCK_MONOTONIC ns>: the run stops with
   * xla_gpu.errors.DeadlineExceededError once it has passed (checked
   * between while-loop iterations); any other keyword is for Python. */
  /* donated=<bytes, one per argument>: nonzero where the caller gives the
   * argument up (see the top of the file). */
  Control control = {poll_signals, NULL, 0};
  Py_ssize_t nargs = PyTuple_Size(args);
  if (nargs != self->num_parameters) Py_RETURN_NOTIMPLEMENTED;
  const unsigned char *donated = NULL;
  if (kwargs != NULL && PyDict_Size(kwargs) != 0) {
    PyObject *deadline = PyDict_GetItemString(kwargs, "deadline_ns");
    PyObject *flags = PyDict_GetItemString(kwargs, "donated");
    if (PyDict_Size(kwargs) != (deadline != NULL) + (flags != NULL))
      Py_RETURN_NOTIMPLEMENTED;
    if (deadline != NULL && deadline != Py_None) {
      control.deadline_ns = PyLong_AsLongLong(deadline);
      if (control.deadline_ns == -1 && PyErr_Occurred()) return NULL;
    }
    if (flags != NULL && flags != Py_None) {
      if (!PyBytes_Check(flags) || PyBytes_Size(flags) != nargs) Py_RETURN_NOTIMPLEMENTED;
      donated = (const unsigned char *)PyBytes_AsString(flags);
      if (donated == NULL) return NULL;
    }
  }
  PyObject *stack_args[STACK_ALLOCATIONS], *stack_results[STACK_ALLOCATIONS];
  PyObject **items = stack_args, **results = stack_results;
  PyObject *out = NULL;
  if (nargs > STACK_ALLOCATIONS || self->num_outputs > STACK_ALLOCATIONS) {
    items = PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + 1));
    results = PyMem_Malloc(sizeof(PyObject *) * (size_t)(self->num_outputs + 1));
    if (!items || !results) {
      PyErr_NoMemory();
      goto done;
    }
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) items[i] = PyTuple_GetItem(args, i);   /* borrowed */
  int status = run_arrays(self, items, nargs, &control, donated, results);
  if (status == 1) {
    Py_INCREF(Py_NotImplemented);
    out = Py_NotImplemented;
  } else if (status == 0) {
    out = PyTuple_New(self->num_outputs);
    for (Py_ssize_t i = 0; i < self->num_outputs; ++i) {
      if (out != NULL) PyTuple_SetItem(out, i, results[i]);   /* steals */
      else Py_DECREF(results[i]);
    }
  }
done:
  if (items != stack_args) {
    PyMem_Free(items);
    PyMem_Free(results);
  }
  return out;
}

/* The C entry of the PJRT plugin's Execute (pjrt/xla_gpu_pjrt.c), whose
 * address `call_address()` gives: `run` must be a HostRun; the arguments
 * are borrowed, the `num_results` results come back as new references.
 * 0: ran; 1: not for this path (wrong count or argument, nothing ran);
 * -1: the run failed, its exception set. Call with the GIL held. Where a
 * jitted call goes through here no Python object is made but the output
 * arrays (the pool's own, most of the time). */
static int host_run_call_c(PyObject *run, PyObject *const *args, Py_ssize_t nargs,
                           PyObject **results, Py_ssize_t num_results) {
  HostRun *self = (HostRun *)run;
  if (num_results != self->num_outputs) return 1;
  Control control = {poll_signals, NULL, 0};
  return run_arrays(self, args, nargs, &control, NULL, results);
}

/* host_run_call_c with per-argument donation flags (`call_donated_address`):
 * `donated[i]` nonzero where argument i is donated and nothing else reads
 * it (the caller consumes it after the run); NULL as none. */
static int host_run_call_donated_c(PyObject *run, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject **results, Py_ssize_t num_results,
                                   const unsigned char *donated) {
  HostRun *self = (HostRun *)run;
  if (num_results != self->num_outputs) return 1;
  Control control = {poll_signals, NULL, 0};
  return run_arrays(self, args, nargs, &control, donated, results);
}

static int c_contiguous(const Shape *shape, const npy_intp *strides, npy_intp itemsize) {
  npy_intp expected = itemsize;
  for (int d = shape->ndim - 1; d >= 0; --d) {
    if (shape->dims[d] == 0) return 1;
    if (shape->dims[d] != 1 && strides[d] != expected) return 0;
    expected *= shape->dims[d];
  }
  return 1;
}

/* The item size through Python: numpy 1 and 2 spell it differently in C.
 * -1 with an exception set on failure. */
static npy_intp descr_itemsize(PyArray_Descr *descr) {
  PyObject *size = PyObject_GetAttrString((PyObject *)descr, "itemsize");
  npy_intp itemsize = size ? (npy_intp)PyLong_AsSsize_t(size) : -1;
  Py_XDECREF(size);
  return itemsize;
}

static PyObject *shape_tuple(const Shape *shape) {
  PyObject *out = PyTuple_New(shape->ndim);
  if (out == NULL) return NULL;
  for (int d = 0; d < shape->ndim; ++d) {
    PyObject *v = PyLong_FromSsize_t((Py_ssize_t)shape->dims[d]);
    if (v == NULL) {
      Py_DECREF(out);
      return NULL;
    }
    PyTuple_SetItem(out, d, v);
  }
  return out;
}

/* HostRun.outputs(): per output slot (dtype, shape, C-contiguous). */
static PyObject *host_run_outputs(PyObject *obj, PyObject *unused) {
  (void)unused;
  HostRun *self = (HostRun *)obj;
  PyObject *out = PyTuple_New(self->num_outputs);
  if (out == NULL) return NULL;
  for (Py_ssize_t i = 0; i < self->num_outputs; ++i) {
    Py_INCREF(Py_None);
    PyTuple_SetItem(out, i, Py_None);
  }
  for (Py_ssize_t i = 0; i < self->num_pools + self->num_views; ++i) {
    PyArray_Descr *descr;
    const Shape *shape;
    Py_ssize_t slot;
    int contiguous = 1;
    if (i < self->num_pools) {
      const Pool *p = &self->pools[i];
      if (p->slot < 0) continue;
      slot = p->slot, descr = p->descr, shape = &p->shape;
    } else {
      const View *v = &self->views[i - self->num_pools];
      slot = v->slot, descr = v->descr, shape = &v->shape;
      npy_intp itemsize = descr_itemsize(descr);
      if (itemsize < 0) {
        Py_DECREF(out);
        return NULL;
      }
      contiguous = c_contiguous(shape, v->strides, itemsize);
    }
    PyObject *dims = shape_tuple(shape);
    PyObject *item = dims ? Py_BuildValue("(OOO)", (PyObject *)descr, dims,
                                          contiguous ? Py_True : Py_False) : NULL;
    Py_XDECREF(dims);
    if (item == NULL) {
      Py_DECREF(out);
      return NULL;
    }
    PyTuple_SetItem(out, slot, item);
  }
  return out;
}

static PyObject *host_run_call_address(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return PyLong_FromVoidPtr((void *)host_run_call_c);
}

static PyObject *host_run_call_donated_address(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return PyLong_FromVoidPtr((void *)host_run_call_donated_c);
}

static PyObject *host_run_counters(PyObject *obj, PyObject *unused) {
  HostRun *self = (HostRun *)obj;
  PyObject *out = PyTuple_New(NUM_COUNTERS);
  if (out == NULL) return NULL;
  for (int i = 0; i < NUM_COUNTERS; ++i) {
    PyObject *value = PyLong_FromLongLong(self->counters[i]);
    if (value == NULL) {
      Py_DECREF(out);
      return NULL;
    }
    PyTuple_SetItem(out, i, value);
  }
  return out;
}

static PyMethodDef host_run_methods[] = {
    {"counters", host_run_counters, METH_NOARGS,
     "The executor's counters of the last run, in XlaGpuHostExecute's order."},
    {"outputs", host_run_outputs, METH_NOARGS,
     "Per output: (dtype, shape, whether the array a run returns is C-contiguous)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot host_run_slots[] = {
    {Py_tp_new, host_run_new},
    {Py_tp_dealloc, host_run_dealloc},
    {Py_tp_call, host_run_call},
    {Py_tp_methods, host_run_methods},
    {Py_tp_doc, "One execution of a cpu-target program per call: HostRun(...)(*arrays) "
                "returns the output arrays, or NotImplemented when an argument is not "
                "exactly what the program reads in place (the caller's Python path then "
                "runs)."},
    {0, NULL},
};

static PyType_Spec host_run_spec = {
    "xla_gpu.runtime._host_run.HostRun", sizeof(HostRun), 0, Py_TPFLAGS_DEFAULT,
    host_run_slots,
};

static struct PyModuleDef host_run_module = {
    PyModuleDef_HEAD_INIT, "_host_run",
    "The cpu target's per-run path of a whole program, in C.", -1, module_functions,
};

PyMODINIT_FUNC PyInit__host_run(void) {
  import_array();
  PyObject *module = PyModule_Create(&host_run_module);
  if (module == NULL) return NULL;
  PyObject *type = PyType_FromSpec(&host_run_spec);
  if (type == NULL || PyModule_AddObject(module, "HostRun", type) < 0) {
    Py_XDECREF(type);   /* PyModule_AddObject steals it only on success */
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
