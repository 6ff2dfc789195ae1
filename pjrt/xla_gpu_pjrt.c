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
 * execute. A handle is read only after the plugin's handle map (a
 * Python dict, read under the GIL) says it is live and of the right kind;
 * anything else goes to the Python slot, which answers as before (errors
 * included).
 *
 * No CUDA, no MLIR, and no Python at link time: the few Python C API
 * functions used are handed in as pointers by the Python side.
 */
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

static void *call_slot(int i, void *args) {
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
static const XlaGpuPjrt_Handle *live_handle(const void *handle, uint64_t kind, void **key_out) {
  if (!handle || g_fast.is_finalizing()) return NULL;
  void *key = g_fast.long_from_void_ptr((void *)handle);
  if (!key) return NULL;
  const XlaGpuPjrt_Handle *h = NULL;
  if (g_fast.dict_get_item(g_fast.objects, key)) {
    const XlaGpuPjrt_Handle *block = (const XlaGpuPjrt_Handle *)handle;
    if (block->kind == kind) h = block;
  }
  if (h && key_out) {
    *key_out = key;
  } else {
    g_fast.decref(key);
  }
  return h;
}

/* A getter answered from the block of the handle in `field` (of `kind`),
 * or by the Python slot when that handle is not a live one of that kind. */
#define FAST_GETTER(name, field, kind, ...)                                            \
  static void *fast_##name(void *p) {                                                 \
    PJRT_##name##_Args *args = (PJRT_##name##_Args *)p;                               \
    if (atomic_load(&g_fast_on)) {                                                    \
      py_scope scope;                                                                 \
      py_enter(&scope);                                                               \
      const XlaGpuPjrt_Handle *h = live_handle(args->field, kind, NULL);              \
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
 * array go with it). */
static void *fast_Buffer_Destroy(void *p) {
  PJRT_Buffer_Destroy_Args *args = (PJRT_Buffer_Destroy_Args *)p;
  if (atomic_load(&g_fast_on)) {
    py_scope scope;
    py_enter(&scope);
    void *key = NULL;
    const XlaGpuPjrt_Handle *h = live_handle(args->buffer, XLA_GPU_PJRT_HANDLE_BUFFER, &key);
    if (h) {
      /* Freeing the object may run Python code (a finalizer of whatever
       * the array views); an exception it leaves is dropped in py_leave. */
      g_fast.dict_del_item(g_fast.objects, key);
      g_fast.decref(key);
    }
    py_leave(&scope);
    if (h) return NULL;
  }
  return call_slot(XLA_GPU_PJRT_SLOT_Buffer_Destroy, p);
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
    FAST(Buffer_ReadyEvent) FAST(Error_Destroy)
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
