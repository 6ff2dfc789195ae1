/* libXlaGpuPjrt.so: the entry point jax's PJRT loader looks up.
 *
 * jax dlopen()s a plugin library and calls GetPjrtApi() to get the PJRT C API
 * function table. xla_gpu implements the functions in Python
 * (xla_gpu.pjrt._plugin, ctypes callbacks); xla_gpu.pjrt.initialize() loads
 * this same file with ctypes (dlopen returns the handle jax gets), wraps its
 * table with XlaGpuPjrtWrapApi() and stores the result with
 * XlaGpuPjrtSetApi() before registering the plugin with jax.
 *
 * The wrapper exists because jaxlib calls the table from deallocators while
 * a Python exception of its own may be set in the calling thread (it has just
 * turned a PJRT error into a Python exception, then frees what it held). A
 * ctypes callback cannot run with an exception set: it would report it as
 * its own and drop it. Each trampoline here takes the GIL, sets the pending
 * exception aside, calls the Python slot and puts the exception back.
 *
 * Fast paths: after every jitted call jaxlib asks the executable for its
 * replica, partition and output counts, waits on the completion event and
 * asks each result buffer for its device and memory; each of those trips
 * into Python costs more than the program's own run. So once the Python
 * side calls XlaGpuPjrtEnableFastPaths, those getters (and the ones jax
 * calls to read a buffer's shape) answer here from the handle's block
 * (XlaGpuPjrt_Handle, filled once by Python when the object is made), and
 * the one shared ready event the plugin hands out for finished work never
 * enters Python; nor does the memory user data jaxlib reads back on every
 * execute. A handle is read only after the library's live set (executables,
 * memories and the results it made; no GIL) or the plugin's handle map (a
 * Python dict, read under the GIL) says it is live and of the right kind;
 * anything else goes to the Python slot, which answers as before (errors
 * included). On the cpu target Execute itself runs here too, once Python has
 * cleared the executable (see "execute" below): the program's C run from
 * xla_gpu.runtime._host_run, and result buffers made without Python objects.
 *
 * No CUDA, no MLIR, and no Python at link time: the few Python C API
 * functions used are handed in as pointers by the Python side.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* The PJRT ABI, with its layout asserted at compile time. */
#include "xla_gpu_pjrt_abi.h"

#define XLA_GPU_PJRT_EXPORT __attribute__((visibility("default")))

/* The table is copied as words: struct_size, extension_start and the
 * PJRT_Api_Version (3 words) precede the function slots. */
#define HEADER_WORDS (offsetof(PJRT_Api, PJRT_Error_Destroy) / sizeof(uint64_t))
/* Trampolines made: room for slots a newer table may append. */
#define MAX_SLOTS 160

_Static_assert(offsetof(PJRT_Api, PJRT_Error_Destroy) % sizeof(uint64_t) == 0,
               "the slots start on a word");
_Static_assert(sizeof(PJRT_Api) == sizeof(uint64_t) * (HEADER_WORDS + XLA_GPU_PJRT_NUM_SLOTS),
               "PJRT_Api is its header words and one word per slot");
_Static_assert(XLA_GPU_PJRT_NUM_SLOTS <= MAX_SLOTS, "a trampoline for every slot");
_Static_assert(sizeof(void *(*)(void *)) == sizeof(uint64_t), "a slot is one word");

typedef void *(*slot_fn)(void *args);
typedef int (*gil_ensure_fn)(void);
typedef void (*gil_release_fn)(int);
typedef void (*err_fetch_fn)(void **, void **, void **);
typedef void (*err_restore_fn)(void *, void *, void *);

static _Atomic(const PJRT_Api *) g_api = NULL;
static slot_fn g_slots[MAX_SLOTS];
static gil_ensure_fn g_ensure;
static gil_release_fn g_release;
static err_fetch_fn g_fetch;
static err_restore_fn g_restore;
static uint64_t g_table[HEADER_WORDS + MAX_SLOTS];

static int python_shutting_down(void);
static int defer_destroy(int slot, void *args);

static void *call_slot(int i, void *args) {
  if (python_shutting_down() || defer_destroy(i, args)) return NULL;
  int gil = g_ensure();
  void *type = NULL, *value = NULL, *traceback = NULL;
  g_fetch(&type, &value, &traceback);
  void *result = g_slots[i](args);
  g_restore(type, value, traceback);
  g_release(gil);
  return result;
}

/* Trampolines 0..159: T10(n) defines slots n0..n9. */
#define T(i) \
  static void *tramp_##i(void *args) { return call_slot(i, args); }
#define T10(n) T(n##0) T(n##1) T(n##2) T(n##3) T(n##4) T(n##5) T(n##6) T(n##7) T(n##8) T(n##9)
T(0) T(1) T(2) T(3) T(4) T(5) T(6) T(7) T(8) T(9)
T10(1) T10(2) T10(3) T10(4) T10(5) T10(6) T10(7) T10(8) T10(9) T10(10) T10(11) T10(12)
T10(13) T10(14) T10(15)

#define R(i) tramp_##i,
#define R10(n) R(n##0) R(n##1) R(n##2) R(n##3) R(n##4) R(n##5) R(n##6) R(n##7) R(n##8) R(n##9)
static slot_fn const k_trampolines[MAX_SLOTS] = {
  R(0) R(1) R(2) R(3) R(4) R(5) R(6) R(7) R(8) R(9)
  R10(1) R10(2) R10(3) R10(4) R10(5) R10(6) R10(7) R10(8) R10(9) R10(10) R10(11) R10(12)
  R10(13) R10(14) R10(15)
};

/* ------------------------------------------------------------ fast paths --- */

/* The Python C API functions the fast paths use (handed in, see above). */
typedef struct {
  void *objects;                            /* the plugin's dict: address -> object */
  void *(*long_from_void_ptr)(void *);      /* PyLong_FromVoidPtr */
  void *(*dict_get_item)(void *, void *);   /* PyDict_GetItem (borrowed, no error) */
  int (*dict_del_item)(void *, void *);     /* PyDict_DelItem */
  void (*decref)(void *);                   /* Py_DecRef */
  int (*is_finalizing)(void);               /* Py_IsFinalizing */
} fast_hooks;

static fast_hooks g_fast;
static _Atomic(int) g_fast_on = 0;

/* Whether the interpreter is shutting down. A thread that takes the GIL
 * then is ended on the spot (pthread_exit), and jaxlib's threads call the
 * slots from noexcept destructors (an executable whose asynchronous
 * compile finished as the process exits): the unwinding would end the
 * process in std::terminate. So nothing enters Python then: a slot returns
 * no error and leaks what it would have freed, as the Python slots do once
 * finalizing. (Py_IsFinalizing reads one atomic word: no GIL needed.) */
static int python_shutting_down(void) {
  return atomic_load(&g_fast_on) && g_fast.is_finalizing();
}

/* ------------------------------------------- destroys on foreign threads --- */

/* A destroy that jaxlib calls on a thread Python has never seen (its
 * thread pools drop the last reference to an executable whose asynchronous
 * compile finished there) does not take the GIL there: its arguments are
 * queued, and the interpreter runs it on its main thread at its next
 * pending call (Py_AddPendingCall needs no GIL). Such a thread waiting for
 * the GIL when the interpreter starts shutting down is ended inside
 * jaxlib's noexcept destructor, and with it the process (std::terminate;
 * checking python_shutting_down first leaves that window open); a queued
 * destroy is only never run (a leak at exit). */
typedef struct deferred_destroy {
  struct deferred_destroy *next;
  int slot;
  uint64_t args[8];  /* a copy of the PJRT_*_Destroy_Args (3 words) */
} deferred_destroy;

static const char *const k_slot_names[] = {
#define XLA_GPU_PJRT_SLOT_NAME_(ret, name) #name,
  XLA_GPU_PJRT_SLOTS(XLA_GPU_PJRT_SLOT_NAME_)
#undef XLA_GPU_PJRT_SLOT_NAME_
};
static bool g_is_destroy[MAX_SLOTS];
static void *(*g_this_thread_state)(void);            /* PyGILState_GetThisThreadState */
static int (*g_add_pending_call)(int (*)(void *), void *);   /* Py_AddPendingCall */
static _Atomic(int) g_defer_on = 0;
static _Atomic(int) g_drain_scheduled = 0;
static atomic_flag g_deferred_flag = ATOMIC_FLAG_INIT;
static deferred_destroy *g_deferred_head, *g_deferred_tail;

/* A spin lock for a few reads and writes; a thread that keeps finding it
 * taken yields the CPU (the holder may have been preempted). */
static void spin_lock(atomic_flag *flag) {
  for (unsigned spins = 0; atomic_flag_test_and_set_explicit(flag, memory_order_acquire);
       ++spins) {
    if (spins >= 64) sched_yield();
  }
}

static void spin_unlock(atomic_flag *flag) {
  atomic_flag_clear_explicit(flag, memory_order_release);
}

static void deferred_lock(void) { spin_lock(&g_deferred_flag); }
static void deferred_unlock(void) { spin_unlock(&g_deferred_flag); }

/* The pending call: the queued destroys, in order, through the table's
 * entries (a fast path where there is one), on the main thread. */
static int run_deferred_destroys(void *unused) {
  (void)unused;
  atomic_store(&g_drain_scheduled, 0);
  deferred_lock();
  deferred_destroy *d = g_deferred_head;
  g_deferred_head = g_deferred_tail = NULL;
  deferred_unlock();
  while (d) {
    deferred_destroy *next = d->next;
    slot_fn entry = (slot_fn)(uintptr_t)g_table[HEADER_WORDS + d->slot];
    entry(d->args);
    free(d);
    d = next;
  }
  return 0;
}

/* Queues destroy `slot`'s `args` when the calling thread is foreign to
 * Python; returns 1 if queued (the destroy is done, as far as the caller
 * goes), 0 to run it here. */
static int defer_destroy(int slot, void *args) {
  if (!atomic_load(&g_defer_on) || slot < 0 || slot >= MAX_SLOTS || !g_is_destroy[slot] ||
      g_this_thread_state() != NULL)
    return 0;
  size_t size = *(const size_t *)args;  /* struct_size comes first */
  deferred_destroy *d = malloc(sizeof *d);
  if (!d || size > sizeof d->args) {
    free(d);
    return 0;
  }
  memset(d->args, 0, sizeof d->args);
  memcpy(d->args, args, size);
  d->slot = slot;
  d->next = NULL;
  deferred_lock();
  if (g_deferred_tail) g_deferred_tail->next = d;
  else g_deferred_head = d;
  g_deferred_tail = d;
  deferred_unlock();
  /* One pending call at a time; one that could not be added (Python's
   * queue full) is asked for again by the next destroy. */
  if (!atomic_exchange(&g_drain_scheduled, 1) &&
      g_add_pending_call(run_deferred_destroys, NULL) != 0)
    atomic_store(&g_drain_scheduled, 0);
  return 1;
}

/* Switches the deferral on (after XlaGpuPjrtEnableFastPaths, whose
 * shutdown check it relies on): `this_thread_state` is
 * PyGILState_GetThisThreadState, `add_pending_call` Py_AddPendingCall.
 * Returns 0, or -1 (off) when the fast paths are off or a pointer is
 * missing. */
XLA_GPU_PJRT_EXPORT int XlaGpuPjrtEnableDeferredDestroys(void *this_thread_state,
                                                         void *add_pending_call) {
  if (!atomic_load(&g_fast_on) || !this_thread_state || !add_pending_call) return -1;
  for (size_t i = 0; i < sizeof k_slot_names / sizeof *k_slot_names && i < MAX_SLOTS; ++i) {
    size_t n = strlen(k_slot_names[i]);
    g_is_destroy[i] = n > 8 && strcmp(k_slot_names[i] + n - 8, "_Destroy") == 0;
  }
  g_this_thread_state = (void *(*)(void))this_thread_state;
  g_add_pending_call = (int (*)(int (*)(void *), void *))add_pending_call;
  atomic_store(&g_defer_on, 1);
  return 0;
}
/* The event of finished work: always ready, no error, never destroyed. */
static _Atomic(const void *) g_ready_event = NULL;

/* The GIL held, the calling thread's exception set aside (the lookups
 * allocate and may free; jaxlib may call with its own exception set). */
typedef struct {
  int gil;
  void *type, *value, *traceback;
} py_scope;

static void py_enter(py_scope *s) {
  s->gil = g_ensure();
  s->type = s->value = s->traceback = NULL;
  g_fetch(&s->type, &s->value, &s->traceback);
}

static void py_leave(py_scope *s) {
  /* Drops whatever a lookup raised, puts the caller's exception back. */
  g_restore(s->type, s->value, s->traceback);
  g_release(s->gil);
}

/* The block of `handle` if the plugin's map holds it and it is of `kind`;
 * NULL otherwise. Call inside py_enter/py_leave; the block stays valid
 * while the GIL is held (its owner is in the map). `key_out`, if given,
 * receives the map's key object (a new reference) on success. */
static const XlaGpuPjrt_Handle *live_object(const void *handle, uint64_t kind, void **key_out,
                                             void **object_out) {
  if (!handle || g_fast.is_finalizing()) return NULL;
  void *key = g_fast.long_from_void_ptr((void *)handle);
  if (!key) return NULL;
  const XlaGpuPjrt_Handle *h = NULL;
  void *object = g_fast.dict_get_item(g_fast.objects, key);
  if (object) {
    const XlaGpuPjrt_Handle *block = (const XlaGpuPjrt_Handle *)handle;
    if (block->kind == kind) h = block;
  }
  if (h && object_out) *object_out = object;
  if (h && key_out) {
    *key_out = key;
  } else {
    g_fast.decref(key);
  }
  return h;
}

static const XlaGpuPjrt_Handle *live_handle(const void *handle, uint64_t kind, void **key_out) {
  return live_object(handle, kind, key_out, NULL);
}

/* -------------------------------------------------------- the live set --- */

/* Handles known live without asking Python: the executables and memories
 * (the Python side adds and removes them, XlaGpuPjrtAddLive and
 * XlaGpuPjrtRemoveLive) and the result buffers the library's Execute makes
 * (added there, removed by Buffer_Destroy before the block is freed). A
 * getter for one of these reads its block under the set's lock, without the
 * GIL or a lookup in the Python map; any other handle goes through the map.
 * Open addressing over addresses; 0 marks an empty slot, 1 a removed one. */
static uintptr_t *g_live;
static size_t g_live_capacity, g_live_used;   /* used: entries and removed slots */
/* A spin lock, as for the memory user data: it is held for a lookup and a
 * few reads, ten times a jitted call, where a mutex's lock and unlock cost
 * more than the work; a thread that keeps finding it taken yields the CPU
 * (the holder may have been preempted). */
static atomic_flag g_live_flag = ATOMIC_FLAG_INIT;

static void live_lock(void) { spin_lock(&g_live_flag); }
static void live_unlock(void) { spin_unlock(&g_live_flag); }

static size_t live_slot(uintptr_t key, size_t capacity) {
  key ^= key >> 17;
  key *= (uintptr_t)0x9E3779B97F4A7C15ull;
  return (size_t)(key >> 20) & (capacity - 1);
}

/* The slot holding `key`, or SIZE_MAX. Under the lock. */
static size_t live_find(uintptr_t key) {
  if (!g_live_capacity) return SIZE_MAX;
  for (size_t i = live_slot(key, g_live_capacity);; i = (i + 1) & (g_live_capacity - 1)) {
    if (g_live[i] == key) return i;
    if (g_live[i] == 0) return SIZE_MAX;
  }
}

/* Under the lock; 0, or -1 out of memory (then the handle is simply not
 * in the set and its getters go through Python). */
static int live_insert(uintptr_t key) {
  if (live_find(key) != SIZE_MAX) return 0;
  if (2 * (g_live_used + 1) > g_live_capacity) {
    size_t count = 0;
    for (size_t i = 0; i < g_live_capacity; ++i) count += g_live[i] > 1;
    size_t capacity = 64;
    while (capacity < 4 * (count + 1)) capacity *= 2;
    uintptr_t *grown = calloc(capacity, sizeof(uintptr_t));
    if (!grown) return -1;
    for (size_t i = 0; i < g_live_capacity; ++i) {
      if (g_live[i] <= 1) continue;
      size_t j = live_slot(g_live[i], capacity);
      while (grown[j]) j = (j + 1) & (capacity - 1);
      grown[j] = g_live[i];
    }
    free(g_live);
    g_live = grown;
    g_live_capacity = capacity;
    g_live_used = count;
  }
  size_t i = live_slot(key, g_live_capacity);
  while (g_live[i] > 1) i = (i + 1) & (g_live_capacity - 1);
  if (g_live[i] == 0) ++g_live_used;
  g_live[i] = key;
  return 0;
}

static void live_erase(uintptr_t key) {
  size_t i = live_find(key);
  if (i != SIZE_MAX) g_live[i] = 1;
}

XLA_GPU_PJRT_EXPORT int XlaGpuPjrtAddLive(const void *handle) {
  if (!handle) return -1;
  live_lock();
  int rc = live_insert((uintptr_t)handle);
  live_unlock();
  return rc;
}

/* Call before the block goes (the Python side: before the object leaves
 * its map). */
XLA_GPU_PJRT_EXPORT void XlaGpuPjrtRemoveLive(const void *handle) {
  live_lock();
  live_erase((uintptr_t)handle);
  live_unlock();
}

/* A getter answered from the block of the handle in `field` (of kind
 * `want`): from the live set where the handle is in it, else after the
 * Python map says it is live; by the Python slot when it is not a live one
 * of that kind. */
#define FAST_GETTER(name, field, want, ...)                                            \
  static void *fast_##name(void *p) {                                                 \
    PJRT_##name##_Args *args = (PJRT_##name##_Args *)p;                               \
    if (atomic_load(&g_fast_on)) {                                                    \
      live_lock();                                                                    \
      const XlaGpuPjrt_Handle *h = (const XlaGpuPjrt_Handle *)args->field;            \
      if (!h || live_find((uintptr_t)h) == SIZE_MAX || h->kind != (want)) h = NULL;   \
      if (h) { __VA_ARGS__; }                                                         \
      live_unlock();                                                                  \
      if (h || python_shutting_down()) return NULL;                                  \
      py_scope scope;                                                                 \
      py_enter(&scope);                                                               \
      h = live_handle(args->field, want, NULL);                                       \
      if (h) { __VA_ARGS__; }                                                         \
      py_leave(&scope);                                                               \
      if (h) return NULL;                                                             \
    }                                                                                 \
    return call_slot(XLA_GPU_PJRT_SLOT_##name, p);                                    \
  }

#define BUFFER XLA_GPU_PJRT_HANDLE_BUFFER
#define EXECUTABLE XLA_GPU_PJRT_HANDLE_EXECUTABLE
FAST_GETTER(Executable_NumReplicas, executable, EXECUTABLE, args->num_replicas = h->num_replicas)
FAST_GETTER(Executable_NumPartitions, executable, EXECUTABLE,
            args->num_partitions = h->num_partitions)
FAST_GETTER(Executable_NumOutputs, executable, EXECUTABLE, args->num_outputs = h->num_outputs)
FAST_GETTER(Buffer_Device, buffer, BUFFER, args->device = h->device)
FAST_GETTER(Buffer_Memory, buffer, BUFFER, args->memory = h->memory)
FAST_GETTER(Buffer_ElementType, buffer, BUFFER, args->type = (PJRT_Buffer_Type)h->type)
FAST_GETTER(Buffer_Dimensions, buffer, BUFFER, args->dims = h->dims; args->num_dims = h->num_dims)
FAST_GETTER(Buffer_UnpaddedDimensions, buffer, BUFFER,
            args->unpadded_dims = h->dims; args->num_dims = h->num_dims)
FAST_GETTER(Buffer_OnDeviceSizeInBytes, buffer, BUFFER,
            args->on_device_size_in_bytes = h->on_device_size)
FAST_GETTER(Buffer_IsDeleted, buffer, BUFFER, args->is_deleted = h->deleted != 0)
FAST_GETTER(Buffer_IsOnCpu, buffer, BUFFER, args->is_on_cpu = h->on_cpu != 0)
FAST_GETTER(Memory_Kind, memory, XLA_GPU_PJRT_HANDLE_MEMORY,
            args->kind = h->memory_kind; args->kind_size = h->memory_kind_size)
#undef BUFFER
#undef EXECUTABLE

/* Buffer_Destroy: drops the buffer from the plugin's map, as the Python
 * slot does (where the map held the last reference, the buffer and its
 * array go with it); a block the library's Execute made is freed here (no
 * Python object reads it past its destroy: PJRT forbids any later use of
 * the handle). */
static void *fast_Buffer_Destroy(void *p) {
  PJRT_Buffer_Destroy_Args *args = (PJRT_Buffer_Destroy_Args *)p;
  if (python_shutting_down() || defer_destroy(XLA_GPU_PJRT_SLOT_Buffer_Destroy, p)) return NULL;
  if (atomic_load(&g_fast_on)) {
    py_scope scope;
    py_enter(&scope);
    void *key = NULL;
    const XlaGpuPjrt_Handle *h = live_handle(args->buffer, XLA_GPU_PJRT_HANDLE_BUFFER, &key);
    if (h) {
      /* Freeing the object may run Python code (a finalizer of whatever
       * the array views); an exception it leaves is dropped in py_leave. */
      if (h->library_owned) XlaGpuPjrtRemoveLive(h);
      g_fast.dict_del_item(g_fast.objects, key);
      g_fast.decref(key);
      if (h->library_owned) free((void *)h);
    }
    py_leave(&scope);
    if (h) return NULL;
  }
  return call_slot(XLA_GPU_PJRT_SLOT_Buffer_Destroy, p);
}

/* --------------------------------------------------------------- execute --- */

/* Execute of the cpu target, the path of every jitted call: the program's
 * C run (xla_gpu.runtime._host_run's entry, over the executable's HostRun)
 * on the arguments' arrays, and a block per result made here and put in
 * the plugin's map with the result array as its value (the Python side
 * makes a Buffer object of it only when a Python slot asks for the buffer).
 * No Python object is made but the output arrays. Whatever this path does
 * not handle goes to the Python slot before anything ran, which runs it
 * and reports errors as before: an executable the Python side has not
 * cleared for it (several devices, token parameters, outputs that need
 * converting, the cuda target), an argument that is not a live buffer
 * with an array on the executable's device, a donated argument also passed
 * at another position (Python refuses the call), a run inside an xla_gpu
 * trace, or a run that failed (the Python path runs it again and reports
 * the error with its message: a run has no side effects, as donated
 * arguments are consumed only after a run succeeded).
 *
 * Donation, as the Python slot does it (_consume_donated): the program
 * never writes an argument's array (the runtime copies a parameter whose
 * allocation the program writes, the donated ones included, into its own
 * pooled memory, which becomes the aliased output), so a donated input is
 * consumed after the run: its block is marked deleted (jax refuses it
 * from then on, and an Execute still passed it reports "the buffer has
 * been deleted or donated") and its array dropped, unless
 * jaxlib lists it as not donatable for this call or a numpy view still
 * reads it (external references: then it stays as it is, as on XLA:CPU).
 * Dropping the reference frees nothing another user holds: a concurrent
 * run or view keeps its own reference, and the pool hands the memory out
 * again only when nothing else refers to it.
 *
 * In place (with the runtime's donating entry, XlaGpuPjrtEnableInPlaceDonation):
 * an argument donated in this call and read by nothing else (not listed as
 * not donatable, no external reference; passed twice is refused above) is
 * flagged to the run, which writes it in place where the program writes
 * its parameter allocation, its array becoming the aliased output, as
 * XLA's output is the donated buffer. A flagged argument is consumed after
 * the run whatever happened meanwhile (its block deleted; its array kept
 * only while an external reference taken during the run still reads it). */
typedef int (*host_run_call_fn)(void *run, void *const *args, ptrdiff_t nargs, void **results,
                                ptrdiff_t num_results);
typedef int (*host_run_call_donated_fn)(void *run, void *const *args, ptrdiff_t nargs,
                                        void **results, ptrdiff_t num_results,
                                        const unsigned char *donated);

typedef struct {
  host_run_call_fn call;
  int (*dict_set_item)(void *, void *, void *);   /* PyDict_SetItem */
  void (*incref)(void *);                         /* Py_IncRef */
  int (*context_var_get)(void *, void *, void **);   /* PyContextVar_Get */
  void *trace_var;                                /* the active xla_gpu trace */
  void *none;                                     /* Py_None */
} execute_hooks;

static execute_hooks g_exec;
static _Atomic(int) g_execute_on = 0;

/* Consuming a donated argument whose map value is its Buffer object: its
 * `_array` attribute is set to None (a plain instance attribute, so no
 * Python code runs). */
typedef struct {
  int (*set_attr)(void *, void *, void *);   /* PyObject_SetAttr */
  void *array_name;                          /* "_array" */
} donation_hooks;

static donation_hooks g_donate;
static _Atomic(int) g_donation_on = 0;
/* The runtime's entry that takes per-argument donation flags; NULL: the
 * run copies donated arguments. */
static _Atomic(host_run_call_donated_fn) g_call_donated = NULL;

/* Arguments and results handled without a heap array. */
#define STACK_VALUES 32

/* A result's block, its dimensions after it. */
typedef struct {
  XlaGpuPjrt_Handle handle;
  int64_t dims[];
} library_buffer;

/* Inside an xla_gpu trace the Python path records the run. */
static int tracing(void) {
  void *value = NULL;
  if (g_exec.context_var_get(g_exec.trace_var, NULL, &value) < 0) return 1;
  int active = value != NULL && value != g_exec.none;
  if (value) g_fast.decref(value);
  return active;
}

/* Whether jaxlib lists parameter `p` as not donatable in this call. */
static int not_donatable(const PJRT_LoadedExecutable_Execute_Args *args, int64_t p) {
  const PJRT_ExecuteOptions *o = args->options;
  if (!o || !o->non_donatable_input_indices ||
      o->struct_size < offsetof(PJRT_ExecuteOptions, num_non_donatable_input_indices) +
                           sizeof(size_t))
    return 0;
  for (size_t i = 0; i < o->num_non_donatable_input_indices; ++i)
    if (o->non_donatable_input_indices[i] == p) return 1;
  return 0;
}

static int compare_pointers(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return (x > y) - (x < y);
}

/* Whether a donated parameter's buffer is also passed at another position
 * (every donated parameter, listed as not donatable or not, as the Python
 * slot checks; it refuses the call with its message). Out of memory: 1,
 * the Python slot decides. */
static int donated_twice(PJRT_Buffer *const *arg_list, size_t num_args, const int64_t *donated,
                         size_t num_donated) {
  if (num_args * num_donated <= 4096) {
    for (size_t k = 0; k < num_donated; ++k) {
      if (donated[k] < 0 || (size_t)donated[k] >= num_args) continue;
      size_t p = (size_t)donated[k];
      for (size_t i = 0; i < num_args; ++i)
        if (i != p && arg_list[i] == arg_list[p]) return 1;
    }
    return 0;
  }
  /* Many arguments (a large model's parameters): sorted, a pointer passed
   * twice sits next to its twin. */
  uintptr_t *sorted = malloc(sizeof(uintptr_t) * num_args);
  if (!sorted) return 1;
  for (size_t i = 0; i < num_args; ++i) sorted[i] = (uintptr_t)arg_list[i];
  qsort(sorted, num_args, sizeof(uintptr_t), compare_pointers);
  int twice = 0;
  for (size_t k = 0; k < num_donated && !twice; ++k) {
    if (donated[k] < 0 || (size_t)donated[k] >= num_args) continue;
    uintptr_t key = (uintptr_t)arg_list[donated[k]];
    size_t lo = 0, hi = num_args;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < key) lo = mid + 1; else hi = mid;
    }
    twice = lo + 1 < num_args && sorted[lo + 1] == key;
  }
  free(sorted);
  return twice;
}

/* After a successful run: each donated argument (not listed as not
 * donatable) is consumed as _consume_donated does it, unless a numpy view
 * still reads it. The run released the GIL: the handle is looked up again
 * (a buffer destroyed meanwhile has nothing left to consume). */
static void consume_donated(const PJRT_LoadedExecutable_Execute_Args *args,
                            const XlaGpuPjrt_Handle *e, PJRT_Buffer *const *arg_list,
                            size_t num_args, const unsigned char *flagged) {
  for (size_t k = 0; k < e->num_donated; ++k) {
    int64_t p = e->donated[k];
    if (p < 0 || (size_t)p >= num_args || not_donatable(args, p)) continue;
    void *key = NULL, *object = NULL;
    XlaGpuPjrt_Handle *b =
        (XlaGpuPjrt_Handle *)live_object(arg_list[p], XLA_GPU_PJRT_HANDLE_BUFFER, &key, &object);
    if (!b) continue;
    /* Given to the run to write: gone, whatever took a reference since
     * (that view keeps the array until Buffer_DecreaseExternalReferenceCount). */
    if (flagged && flagged[p]) b->deleted = 1;
    if (b->external_refs == 0) {
      void *array = b->array;
      b->deleted = 1;
      b->array = NULL;
      if (array && object == array) {
        /* A result the library made that no Python slot asked for (the
         * map's value is its array): None marks it consumed (the Python
         * side's _adopt reads that), and the array goes with the value. */
        g_exec.dict_set_item(g_fast.objects, key, g_exec.none);
      } else if (object != g_exec.none) {
        /* Its Buffer object: reads the block for `deleted` and the array
         * word; its reference to the array goes. A failure (out of memory)
         * only keeps the array until the buffer is destroyed; what it
         * raised is dropped in py_leave. */
        g_exec.incref(object);   /* held while the array's release runs */
        g_donate.set_attr(object, g_donate.array_name, g_exec.none);
        g_fast.decref(object);
      }
    }
    g_fast.decref(key);
  }
}

/* 1: done, outputs written; 0: nothing done, the Python slot runs it.
 * Inside py_enter/py_leave. */
static int execute_here(PJRT_LoadedExecutable_Execute_Args *args) {
  if (args->num_devices != 1 || !args->output_lists) return 0;
  void *exe_object = NULL;
  const XlaGpuPjrt_Handle *e =
      live_object(args->executable, XLA_GPU_PJRT_HANDLE_EXECUTABLE, NULL, &exe_object);
  if (!e || !e->host_run || (e->num_outputs && !e->outputs)) return 0;
  if (args->execute_device && args->execute_device != e->device) return 0;
  if (e->num_donated && (!atomic_load(&g_donation_on) || !e->donated)) return 0;
  if (tracing()) return 0;
  size_t num_args = args->num_args, num_outputs = e->num_outputs;
  if (num_args && !args->argument_lists) return 0;
  void *stack_arrays[STACK_VALUES], *stack_results[STACK_VALUES];
  void **arrays = stack_arrays, **results = stack_results;
  if (num_args > STACK_VALUES || num_outputs > STACK_VALUES) {
    arrays = malloc(sizeof(void *) * (num_args + 1));
    results = malloc(sizeof(void *) * (num_outputs + 1));
    if (!arrays || !results) {
      free(arrays);
      free(results);
      return 0;
    }
  }
  int done = 0;
  size_t held = 0;
  unsigned char stack_flags[STACK_VALUES], *flags = NULL;
  PJRT_Buffer *const *arg_list = num_args ? args->argument_lists[0] : NULL;
  for (; held < num_args; ++held) {
    const XlaGpuPjrt_Handle *b = live_handle(arg_list[held], XLA_GPU_PJRT_HANDLE_BUFFER, NULL);
    if (!b || b->deleted || !b->array || b->device != e->device) goto release;
    arrays[held] = b->array;
    g_exec.incref(b->array);   /* the run lets other threads go */
  }
  if (e->num_donated && donated_twice(arg_list, num_args, e->donated, e->num_donated))
    goto release;
  /* Donated and read by nothing else: the run may write it in place. */
  host_run_call_donated_fn call_donated = atomic_load(&g_call_donated);
  if (e->num_donated && call_donated) {
    if (num_args > STACK_VALUES) {
      flags = calloc(num_args, 1);
      if (!flags) goto release;
    } else {
      flags = stack_flags;
      memset(flags, 0, num_args);
    }
    for (size_t k = 0; k < e->num_donated; ++k) {
      int64_t p = e->donated[k];
      if (p < 0 || (size_t)p >= num_args || not_donatable(args, p)) continue;
      const XlaGpuPjrt_Handle *b = live_handle(arg_list[p], XLA_GPU_PJRT_HANDLE_BUFFER, NULL);
      flags[p] = b && b->external_refs == 0;
    }
  }
  /* The executable (and so its HostRun and outputs) outlives the run. */
  g_exec.incref(exe_object);
  int rc = flags ? call_donated(e->host_run, arrays, (ptrdiff_t)num_args, results,
                                (ptrdiff_t)num_outputs, flags)
                 : g_exec.call(e->host_run, arrays, (ptrdiff_t)num_args, results,
                               (ptrdiff_t)num_outputs);
  if (rc == 0) {
    PJRT_Buffer **out_list = args->output_lists[0];
    size_t made = 0;
    for (; made < num_outputs; ++made) {
      const XlaGpuPjrt_Output *o = &e->outputs[made];
      library_buffer *b = calloc(1, sizeof(library_buffer) + sizeof(int64_t) * (o->num_dims + 1));
      if (!b) break;
      XlaGpuPjrt_Handle *h = &b->handle;
      h->kind = XLA_GPU_PJRT_HANDLE_BUFFER;
      h->device = e->device;
      h->memory = e->memory;
      memcpy(b->dims, o->dims, sizeof(int64_t) * o->num_dims);
      h->dims = b->dims;
      h->num_dims = o->num_dims;
      h->on_device_size = o->on_device_size;
      h->type = o->type;
      h->on_cpu = 1;
      h->array = results[made];   /* the map's value holds it */
      h->library_owned = 1;
      void *key = g_fast.long_from_void_ptr(b);
      if (!key || g_exec.dict_set_item(g_fast.objects, key, results[made]) < 0) {
        if (key) g_fast.decref(key);
        free(b);
        break;
      }
      g_fast.decref(key);
      XlaGpuPjrtAddLive(b);   /* out of memory: its getters ask the map */
      out_list[made] = (PJRT_Buffer *)b;
    }
    if (made == num_outputs) {
      if (e->num_donated) consume_donated(args, e, arg_list, num_args, flags);
      if (args->device_complete_events)
        args->device_complete_events[0] = (PJRT_Event *)atomic_load(&g_ready_event);
      done = 1;
    } else {   /* out of memory: undone, the Python path tries */
      for (size_t j = 0; j < made; ++j) {
        XlaGpuPjrtRemoveLive(out_list[j]);
        void *key = g_fast.long_from_void_ptr(out_list[j]);
        if (key) {
          g_fast.dict_del_item(g_fast.objects, key);
          g_fast.decref(key);
        }
        free(out_list[j]);
        out_list[j] = NULL;
      }
    }
    for (size_t j = 0; j < num_outputs; ++j) g_fast.decref(results[j]);
  }
  g_fast.decref(exe_object);
release:
  for (size_t i = 0; i < held; ++i) g_fast.decref(arrays[i]);
  if (flags != stack_flags) free(flags);
  if (arrays != stack_arrays) free(arrays);
  if (results != stack_results) free(results);
  return done;
}

static void *fast_LoadedExecutable_Execute(void *p) {
  if (atomic_load(&g_execute_on) && !python_shutting_down()) {
    py_scope scope;
    py_enter(&scope);
    int done = execute_here((PJRT_LoadedExecutable_Execute_Args *)p);
    py_leave(&scope);   /* drops what a failed run raised */
    if (done) return NULL;
  }
  return call_slot(XLA_GPU_PJRT_SLOT_LoadedExecutable_Execute, p);
}

/* The shared ready event: answered without the GIL. */
static int is_ready_event(const void *event) {
  return event && atomic_load(&g_fast_on) && event == atomic_load(&g_ready_event);
}

static void *fast_Event_Destroy(void *p) {
  PJRT_Event_Destroy_Args *args = (PJRT_Event_Destroy_Args *)p;
  if (is_ready_event(args->event)) return NULL;   /* shared: never freed */
  return call_slot(XLA_GPU_PJRT_SLOT_Event_Destroy, p);
}

static void *fast_Event_IsReady(void *p) {
  PJRT_Event_IsReady_Args *args = (PJRT_Event_IsReady_Args *)p;
  if (is_ready_event(args->event)) {
    args->is_ready = true;
    return NULL;
  }
  return call_slot(XLA_GPU_PJRT_SLOT_Event_IsReady, p);
}

static void *fast_Event_Error(void *p) {
  PJRT_Event_Error_Args *args = (PJRT_Event_Error_Args *)p;
  if (is_ready_event(args->event)) return NULL;
  return call_slot(XLA_GPU_PJRT_SLOT_Event_Error, p);
}

static void *fast_Event_Await(void *p) {
  PJRT_Event_Await_Args *args = (PJRT_Event_Await_Args *)p;
  if (is_ready_event(args->event)) return NULL;
  return call_slot(XLA_GPU_PJRT_SLOT_Event_Await, p);
}

static void *fast_Event_OnReady(void *p) {
  PJRT_Event_OnReady_Args *args = (PJRT_Event_OnReady_Args *)p;
  if (is_ready_event(args->event)) {
    /* Already ready: called now, without an error (as the Python slot
     * does, outside the GIL). */
    if (args->callback) args->callback(NULL, args->user_arg);
    return NULL;
  }
  return call_slot(XLA_GPU_PJRT_SLOT_Event_OnReady, p);
}

/* A live buffer's ready event is the shared one; a deleted buffer's
 * carries an error, which the Python slot makes. */
static void *fast_Buffer_ReadyEvent(void *p) {
  PJRT_Buffer_ReadyEvent_Args *args = (PJRT_Buffer_ReadyEvent_Args *)p;
  if (atomic_load(&g_fast_on)) {
    const XlaGpuPjrt_Handle *b = (const XlaGpuPjrt_Handle *)args->buffer;
    live_lock();
    int known = b && live_find((uintptr_t)b) != SIZE_MAX &&
                b->kind == XLA_GPU_PJRT_HANDLE_BUFFER && !b->deleted;
    live_unlock();
    if (known) {
      args->event = (PJRT_Event *)atomic_load(&g_ready_event);
      return NULL;
    }
    if (python_shutting_down()) return NULL;
    py_scope scope;
    py_enter(&scope);
    const XlaGpuPjrt_Handle *h = live_handle(args->buffer, XLA_GPU_PJRT_HANDLE_BUFFER, NULL);
    int ready = h && !h->deleted;
    py_leave(&scope);
    if (ready) {
      args->event = (PJRT_Event *)atomic_load(&g_ready_event);
      return NULL;
    }
  }
  return call_slot(XLA_GPU_PJRT_SLOT_Buffer_ReadyEvent, p);
}

/* jaxlib destroys the NULL error of a slot that succeeded, too. */
static void *fast_Error_Destroy(void *p) {
  PJRT_Error_Destroy_Args *args = (PJRT_Error_Destroy_Args *)p;
  if (!args->error) return NULL;
  return call_slot(XLA_GPU_PJRT_SLOT_Error_Destroy, p);
}

/* The table entry of slot `i`: its fast path if it has one. */
static slot_fn entry_for(size_t i) {
  switch (i) {
#define FAST(name) \
  case XLA_GPU_PJRT_SLOT_##name: return fast_##name;
    FAST(Executable_NumReplicas) FAST(Executable_NumPartitions) FAST(Executable_NumOutputs)
    FAST(Buffer_Device) FAST(Buffer_Memory) FAST(Buffer_ElementType) FAST(Buffer_Dimensions)
    FAST(Buffer_UnpaddedDimensions) FAST(Buffer_OnDeviceSizeInBytes) FAST(Memory_Kind)
    FAST(Buffer_Destroy) FAST(Event_Destroy) FAST(Event_IsReady) FAST(Event_Error)
    FAST(Event_Await) FAST(Event_OnReady) FAST(Buffer_IsDeleted) FAST(Buffer_IsOnCpu)
    FAST(Buffer_ReadyEvent) FAST(Error_Destroy) FAST(LoadedExecutable_Execute)
#undef FAST
    default: return k_trampolines[i];
  }
}

/* Switches the fast paths on: `objects` is the plugin's handle map (a
 * dict), `ready_event` the shared ready event's handle, `hooks` the
 * Python C API functions in fast_hooks order after `objects`. Returns 0, or
 * -1 (nothing switched on) if the table is not wrapped or a pointer is
 * missing. Call once, before jax loads the library. */
XLA_GPU_PJRT_EXPORT int XlaGpuPjrtEnableFastPaths(void *objects, const void *ready_event,
                                                  void *long_from_void_ptr, void *dict_get_item,
                                                  void *dict_del_item, void *decref,
                                                  void *is_finalizing) {
  if (!g_ensure || !objects || !ready_event || !long_from_void_ptr || !dict_get_item ||
      !dict_del_item || !decref || !is_finalizing)
    return -1;
  g_fast.objects = objects;
  g_fast.long_from_void_ptr = (void *(*)(void *))long_from_void_ptr;
  g_fast.dict_get_item = (void *(*)(void *, void *))dict_get_item;
  g_fast.dict_del_item = (int (*)(void *, void *))dict_del_item;
  g_fast.decref = (void (*)(void *))decref;
  g_fast.is_finalizing = (int (*)(void))is_finalizing;
  atomic_store(&g_ready_event, ready_event);
  atomic_store(&g_fast_on, 1);
  return 0;
}

/* Switches the library's Execute on (after XlaGpuPjrtEnableFastPaths):
 * `call` is xla_gpu.runtime._host_run's C entry, `trace_var` the context
 * variable of the active xla_gpu trace, then PyDict_SetItem, Py_IncRef,
 * PyContextVar_Get and Py_None. Returns 0, or -1 (off) when the fast
 * paths are off or a pointer is missing. */
XLA_GPU_PJRT_EXPORT int XlaGpuPjrtEnableExecute(void *call, void *trace_var, void *dict_set_item,
                                                void *incref, void *context_var_get,
                                                void *none) {
  if (!atomic_load(&g_fast_on) || !call || !trace_var || !dict_set_item || !incref ||
      !context_var_get || !none)
    return -1;
  g_exec.call = (host_run_call_fn)call;
  g_exec.trace_var = trace_var;
  g_exec.dict_set_item = (int (*)(void *, void *, void *))dict_set_item;
  g_exec.incref = (void (*)(void *))incref;
  g_exec.context_var_get = (int (*)(void *, void *, void **))context_var_get;
  g_exec.none = none;
  atomic_store(&g_execute_on, 1);
  return 0;
}

/* Lets the library's Execute run executables with donated parameters
 * (after XlaGpuPjrtEnableExecute): `set_attr` is PyObject_SetAttr,
 * `array_name` the attribute name "_array" (kept alive by the caller).
 * Returns 0, or -1 (off) when Execute is off or a pointer is missing. */
XLA_GPU_PJRT_EXPORT int XlaGpuPjrtEnableDonation(void *set_attr, void *array_name) {
  if (!atomic_load(&g_execute_on) || !set_attr || !array_name) return -1;
  g_donate.set_attr = (int (*)(void *, void *, void *))set_attr;
  g_donate.array_name = array_name;
  atomic_store(&g_donation_on, 1);
  return 0;
}

/* Lets the library's Execute hand the run its per-call donation flags
 * (after XlaGpuPjrtEnableDonation): `call_donated` is
 * xla_gpu.runtime._host_run's donating entry (`call_donated_address`),
 * which writes a donated argument in place where the program writes its
 * parameter; NULL switches that off again (donated arguments copied, as a
 * benchmark compares). Returns 0, or -1 when donation is off. */
XLA_GPU_PJRT_EXPORT int XlaGpuPjrtEnableInPlaceDonation(void *call_donated) {
  if (!atomic_load(&g_donation_on)) return -1;
  atomic_store(&g_call_donated, (host_run_call_donated_fn)call_donated);
  return 0;
}

/* ------------------------------------------------------ memory user data --- */

/* jaxlib keeps its own objects on each PJRT_Memory (get_user_data and
 * set_user_data of the memory's vtable) and reads them back on every
 * execute; kept here, that read needs no Python. The Python side puts these
 * two functions in the vtable when it switches the fast paths on. */
typedef struct {
  const void *memory;
  const void *key;
  void *data;
  void (*deleter)(void *);
} user_datum;

static user_datum *g_user_data;
static size_t g_user_data_count, g_user_data_capacity;
static atomic_flag g_user_data_lock = ATOMIC_FLAG_INIT;

static void user_data_lock(void) {
  while (atomic_flag_test_and_set_explicit(&g_user_data_lock, memory_order_acquire)) {
  }
}

static void user_data_unlock(void) {
  atomic_flag_clear_explicit(&g_user_data_lock, memory_order_release);
}

static user_datum *find_user_datum(const void *memory, const void *key) {
  for (size_t i = 0; i < g_user_data_count; ++i)
    if (g_user_data[i].memory == memory && g_user_data[i].key == key) return &g_user_data[i];
  return NULL;
}

XLA_GPU_PJRT_EXPORT void *XlaGpuPjrtMemoryGetUserData(PJRT_Memory *memory, const void *key) {
  user_data_lock();
  user_datum *d = find_user_datum(memory, key);
  void *data = d ? d->data : NULL;
  user_data_unlock();
  return data;
}

/* Replaces the datum under (memory, key); the one it replaces is handed to
 * its deleter (unless it is the same data). */
XLA_GPU_PJRT_EXPORT void XlaGpuPjrtMemorySetUserData(PJRT_Memory *memory, const void *key,
                                                     void *data, void (*deleter)(void *)) {
  user_datum old = {NULL, NULL, NULL, NULL};
  user_data_lock();
  user_datum *d = find_user_datum(memory, key);
  if (d) {
    old = *d;
  } else {
    if (g_user_data_count == g_user_data_capacity) {
      size_t capacity = g_user_data_capacity ? 2 * g_user_data_capacity : 16;
      user_datum *grown = realloc(g_user_data, capacity * sizeof(user_datum));
      if (!grown) {   /* nowhere to keep it: the caller finds nothing later */
        user_data_unlock();
        return;
      }
      g_user_data = grown;
      g_user_data_capacity = capacity;
    }
    d = &g_user_data[g_user_data_count++];
  }
  d->memory = memory;
  d->key = key;
  d->data = data;
  d->deleter = deleter;
  user_data_unlock();
  if (old.deleter && old.data && old.data != data) old.deleter(old.data);
}

/* Returns a copy of `api` (a PJRT_Api of at most MAX_SLOTS slots) whose
 * slots are trampolines around `api`'s; NULL if it does not fit or a hook
 * is missing. Call once, before jax loads the library. */
XLA_GPU_PJRT_EXPORT const void *XlaGpuPjrtWrapApi(const void *api, void *gil_ensure,
                                                  void *gil_release, void *err_fetch,
                                                  void *err_restore) {
  if (!api || !gil_ensure || !gil_release || !err_fetch || !err_restore) return NULL;
  const uint64_t *src = (const uint64_t *)api;
  size_t words = ((const PJRT_Api *)api)->struct_size / sizeof(uint64_t);
  if (words <= HEADER_WORDS || words > HEADER_WORDS + MAX_SLOTS) return NULL;
  g_ensure = (gil_ensure_fn)gil_ensure;
  g_release = (gil_release_fn)gil_release;
  g_fetch = (err_fetch_fn)err_fetch;
  g_restore = (err_restore_fn)err_restore;
  memcpy(g_table, src, HEADER_WORDS * sizeof(uint64_t));
  for (size_t i = 0; i < words - HEADER_WORDS; ++i) {
    g_slots[i] = (slot_fn)(uintptr_t)src[HEADER_WORDS + i];
    g_table[HEADER_WORDS + i] = (uint64_t)(uintptr_t)entry_for(i);
  }
  return g_table;
}

/* The table registered by the Python side, or NULL before that (jax then
 * reports that the plugin returned no API instead of crashing). */
XLA_GPU_PJRT_EXPORT const PJRT_Api *GetPjrtApi(void) {
  return atomic_load(&g_api);
}

/* Stores the table; the caller keeps it alive for the life of the process. */
XLA_GPU_PJRT_EXPORT void XlaGpuPjrtSetApi(const void *api) {
  atomic_store(&g_api, (const PJRT_Api *)api);
}
