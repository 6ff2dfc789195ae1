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
 * No CUDA, no MLIR, and no Python at link time: the few Python C API
 * functions used are handed in as pointers by the Python side.
 */
#include <stdatomic.h>
#include <stddef.h>
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
    g_table[HEADER_WORDS + i] = (uint64_t)(uintptr_t)k_trampolines[i];
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
