//===- host_executor.cc - the cpu target's thunk sequence, run natively ---===//
//
// A whole program on the cpu target is a sequence of thunks: kernel
// launches, copies, memsets, gemms, while loops and conditionals. Running
// them one by one from Python costs several microseconds a thunk, which for
// small programs (a scan of 60 launches) is most of the run. This executor
// runs the same sequence in one call: Python encodes it once per program as
// a flat array of int64 words (`xla_gpu/runtime/host_executor.py` writes
// it), and every run passes the allocations' base addresses.
//
// The encoding, one command after another (offsets in bytes, strides in
// elements):
//   KERNEL  1 fn nargs (alloc offset)*nargs   fn indexes `kernels`: a
//                                             `void k_host(void **args)`
//   COPY    2 dst_alloc dst_off src_alloc src_off size
//   MEMSET  3 alloc off pattern width count   width 1, 2 or 4 bytes
//   WHILE   4 pred_alloc pred_off cond_len body_len <cond> <body>
//           runs <cond>, stops when the pred byte is 0, else runs <body>
//   COND    5 sel_alloc sel_off sel_is_pred n len_0..len_n-1 <branch>*n
//           pred: true runs branch 0, false branch 1; s32: the index,
//           out of range runs the last branch (XLA's semantics)
//   CALL    6 index                           `callback(index)`: a thunk
//                                             Python runs (nonzero: failed)
//   GEMM    7 type batch m n k (alloc off sb sr sc)*3
//           out[b,i,j] = sum_p lhs[b,i,p] * rhs[b,p,j]; type 0 f32, 1 f64;
//           the three operands are lhs, rhs, out with strides of batch,
//           row and column. f32 with rows of out contiguous runs in
//           register tiles (AVX-512 or AVX2, as the host has them), the
//           rest in a plain loop.
//   COUNT   8 stat                            stats[stat] += 1
//   FOR     10 count body_len <body>          runs <body> count times: a while
//                                             loop whose trip count is known
//                                             (no condition, no predicate)
//   SPLIT   9 whole blocks_fn nargs blocks parts probe runs reprobe
//           (alloc offset)*nargs
//           a kernel large enough to run as `parts` block ranges on the
//           native pool (XlaGpuHostRunBlocks, ffi/host_blocks.cc) where that
//           pays, as HostKernel.launch decides it in Python: its first
//           `runs` runs are timed on one thread (`whole`: k_host), the next
//           `runs` split (`blocks_fn`: k_host_blocks), the faster way is
//           kept for `reprobe` runs, then timed again. `whole` and
//           `blocks_fn` index `kernels`; `probe` indexes the caller's probe
//           slots (kProbeWords words each, zeroed at first).
// Counters: 0 kernel launches, 1 copies, 2 memsets, 3 gemms, 4 while
// iterations, 5 command buffers (what the Python executor counts).
//
// A while loop is the one command that may never end, and the caller runs
// the stream with the GIL released, where Python cannot see a Ctrl-C. So
// every iteration asks the caller's `XlaGpuHostControl`, at most once a
// millisecond of wall time, whether to stop: its `poll` (which takes the
// GIL and runs Python's signal handlers) or its deadline.
//
// The code is what this package wrote for a program it verified; the
// executor still checks every length and index against the bounds it was
// given, so a malformed stream is an error code, never a wild read.
//
//===----------------------------------------------------------------------===//

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#define XLA_GPU_HOST_EXPORT extern "C" __attribute__((visibility("default")))

// The GEMM command's register tiles are built for x86-64 (AVX-512 and AVX2
// variants, chosen at run time); elsewhere products take the plain loop.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XLA_GPU_HOST_GEMM_TILES 1
#else
#define XLA_GPU_HOST_GEMM_TILES 0
#endif

// ffi/host_blocks.cc, in the same library.
extern "C" int64_t XlaGpuHostRunBlocks(void *blocks_fn, void *const *args, int64_t nargs,
                                       int64_t blocks, int64_t parts);

// What may stop a run (ffi/host_run.c and xla_gpu/runtime/host_executor.py
// declare the same layout): `poll(arg)` nonzero stops it (the caller holds why);
// `deadline_ns` (CLOCK_MONOTONIC, 0: none) stops it once passed.
struct XlaGpuHostControl {
  int (*poll)(void *arg);
  void *arg;
  int64_t deadline_ns;
};

namespace xla_gpu_host {
namespace {

enum Opcode : int64_t {
  kKernel = 1, kCopy = 2, kMemset = 3, kWhile = 4, kConditional = 5,
  kCall = 6, kGemm = 7, kCount = 8, kSplitKernel = 9, kFor = 10,
};
// A SPLIT kernel's probe slot: how it runs now, then per way (one thread,
// split) the runs timed and the fastest in ns, and the runs since the choice.
enum ProbeWord : int64_t {
  kMode = 0, kWholeRuns, kSplitRuns, kWholeBestNs, kSplitBestNs, kRunsSinceChoice,
  kProbeWords = 8,
};
enum Mode : int64_t { kProbing = 0, kWhole = 1, kSplit = 2 };
enum Stat : int64_t { kKernels = 0, kCopies, kMemsets, kGemms, kWhileIterations, kNumStats = 8 };

// Result codes of XlaGpuHostExecute.
constexpr int64_t kOk = 0, kCallbackFailed = 1, kMalformed = 2, kInterrupted = 3,
                  kDeadlineExceeded = 4;
// How often a while loop asks the control: Ctrl-C answers within this.
constexpr int64_t kPollIntervalNs = 1000000;

// Register-tiled f32 products for the executor's GEMM command, compiled
// twice (AVX-512 and AVX2+FMA) and picked by the host's ISA at run time.
//
// Every output element is one sum whose order depends only on k and the
// vector width, never on where its tile falls (full tile or edge), so a
// run is deterministic whatever the shape's remainders.

template <typename V>
constexpr int lanes() { return static_cast<int>(sizeof(V) / sizeof(float)); }

// rhs rows contiguous (NN): an R x NV*lanes tile of out accumulates
// lhs[i,p] (broadcast) times row p of rhs, p = 0..k-1 in order.
template <typename V, int R, int NV>
static inline __attribute__((always_inline)) void tileRows(int64_t k, const float *a,
                                                           int64_t sa1, int64_t sa2,
                                                           const float *b, int64_t sb1,
                                                           float *c, int64_t sc1) {
  constexpr int L = lanes<V>();
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int64_t p = 0; p < k; ++p) {
    const float *brow = b + p * sb1;
    V bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], brow + v * L, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const V x = a[r * sa1 + p * sa2] - V{};
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * sc1 + v * L, &acc[r][v], sizeof(V));
}

template <typename V, int MR, int NV>
static inline __attribute__((always_inline)) void columnsRows(int64_t m, int64_t k,
                                                              const float *a, int64_t sa1,
                                                              int64_t sa2, const float *b,
                                                              int64_t sb1, float *c,
                                                              int64_t sc1) {
  int64_t i = 0;
  for (; i + MR <= m; i += MR)
    tileRows<V, MR, NV>(k, a + i * sa1, sa1, sa2, b, sb1, c + i * sc1, sc1);
  const float *ai = a + i * sa1;
  float *ci = c + i * sc1;
  // The remaining rows as one tile (MR is at most 6).
  switch (m - i) {
  case 5: if constexpr (MR > 5) tileRows<V, 5, NV>(k, ai, sa1, sa2, b, sb1, ci, sc1); break;
  case 4: if constexpr (MR > 4) tileRows<V, 4, NV>(k, ai, sa1, sa2, b, sb1, ci, sc1); break;
  case 3: tileRows<V, 3, NV>(k, ai, sa1, sa2, b, sb1, ci, sc1); break;
  case 2: tileRows<V, 2, NV>(k, ai, sa1, sa2, b, sb1, ci, sc1); break;
  case 1: tileRows<V, 1, NV>(k, ai, sa1, sa2, b, sb1, ci, sc1); break;
  default: break;
  }
}

// Columns [0, w) of rhs (k rows at strides sb1, sb2) as k contiguous rows
// of `width` floats, zero past w: every row tile then reads rhs from L1
// (rows of rhs a power of two apart fall into few L1 sets), and a
// transposed rhs is read as a row-major one.
template <int64_t WIDTH>
static inline __attribute__((always_inline)) void packPanel(int64_t k, int64_t w,
                                                            int64_t width, const float *b,
                                                            int64_t sb1, int64_t sb2,
                                                            float *panel) {
  if (w < width) std::memset(panel, 0, sizeof(float) * static_cast<size_t>(k * width));
  if (sb2 == 1 && w == WIDTH && width == WIDTH) {
    // A whole panel: a copy of constant size per row, inlined.
    for (int64_t p = 0; p < k; ++p)
      std::memcpy(panel + p * WIDTH, b + p * sb1, sizeof(float) * WIDTH);
  } else if (sb2 == 1) {
    for (int64_t p = 0; p < k; ++p)
      std::memcpy(panel + p * width, b + p * sb1, sizeof(float) * static_cast<size_t>(w));
  } else {
    for (int64_t q = 0; q < w; ++q)
      for (int64_t p = 0; p < k; ++p) panel[p * width + q] = b[p * sb1 + q * sb2];
  }
}

// Rows of the column tail's buffer (on the stack).
constexpr int64_t kTailRows = 48;

// out rows contiguous: panels of NV vectors of columns, outermost so that
// a panel stays in L1 across the row tiles. A single row tile reads a
// row-major rhs in place; otherwise each panel is packed first. The last
// columns (fewer than a panel) run zero-padded into `tail`, then copied.
template <typename V, int MR, int NV>
static inline __attribute__((always_inline)) void productRows(
    int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, const int64_t *sa,
    const float *b, const int64_t *sb, float *c, const int64_t *sc) {
  static_assert(NV == 2, "the column tail is one or two vectors wide");
  constexpr int L = lanes<V>();
  constexpr int64_t NR = NV * L;
  const bool direct = sb[2] == 1 && m <= MR;
  thread_local std::vector<float> panel;
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float *ab = a + bi * sa[0];
    const float *bb = b + bi * sb[0];
    float *cb = c + bi * sc[0];
    int64_t j = 0;
    for (; j + NR <= n; j += NR) {
      if (direct) {
        columnsRows<V, MR, NV>(m, k, ab, sa[1], sa[2], bb + j, sb[1], cb + j, sc[1]);
      } else {
        panel.resize(static_cast<size_t>(k * NR));
        packPanel<NR>(k, NR, NR, bb + j * sb[2], sb[1], sb[2], panel.data());
        columnsRows<V, MR, NV>(m, k, ab, sa[1], sa[2], panel.data(), NR, cb + j, sc[1]);
      }
    }
    if (j < n) {
      // The last columns, zero-padded to whole vectors, into a tile buffer
      // of kTailRows rows at a time, whose valid columns are then copied.
      const int64_t w = n - j, width = w <= L ? L : NR;
      float tail[kTailRows * NR];
      panel.resize(static_cast<size_t>(k * width));
      packPanel<NR>(k, w, width, bb + j * sb[2], sb[1], sb[2], panel.data());
      for (int64_t i = 0; i < m; i += kTailRows) {
        const int64_t rows = m - i < kTailRows ? m - i : kTailRows;
        const float *ai = ab + i * sa[1];
        if (width == L)
          columnsRows<V, MR, 1>(rows, k, ai, sa[1], sa[2], panel.data(), L, tail, L);
        else
          columnsRows<V, MR, NV>(rows, k, ai, sa[1], sa[2], panel.data(), NR, tail, NR);
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(cb + (i + r) * sc[1] + j, tail + r * width,
                      sizeof(float) * static_cast<size_t>(w));
      }
    }
  }
}

// lhs rows and rhs columns contiguous along k (NT): R x C dot products,
// each accumulated lane-wise over whole vectors of k, summed across its
// lanes in order, then the k remainder added in order.
template <typename V, int R, int C>
static inline __attribute__((always_inline)) void tileDots(int64_t k, const float *a,
                                                           int64_t sa1, const float *b,
                                                           int64_t sb2, float *c,
                                                           int64_t sc1, int64_t sc2) {
  constexpr int L = lanes<V>();
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < C; ++q) acc[r][q] = V{};
  int64_t p = 0;
  for (; p + L <= k; p += L) {
    V av[R], bv[C];
    for (int r = 0; r < R; ++r) std::memcpy(&av[r], a + r * sa1 + p, sizeof(V));
    for (int q = 0; q < C; ++q) std::memcpy(&bv[q], b + q * sb2 + p, sizeof(V));
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < C; ++q) acc[r][q] += av[r] * bv[q];
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < C; ++q) {
      float s = 0;
      for (int l = 0; l < L; ++l) s += acc[r][q][l];
      for (int64_t t = p; t < k; ++t) s += a[r * sa1 + t] * b[q * sb2 + t];
      c[r * sc1 + q * sc2] = s;
    }
}

template <typename V, int R, int NC>
static inline __attribute__((always_inline)) void rowDots(int64_t n, int64_t k,
                                                          const float *a, int64_t sa1,
                                                          const float *b, int64_t sb2,
                                                          float *c, int64_t sc1,
                                                          int64_t sc2) {
  int64_t j = 0;
  for (; j + NC <= n; j += NC)
    tileDots<V, R, NC>(k, a, sa1, b + j * sb2, sb2, c + j * sc2, sc1, sc2);
  for (; j < n; ++j) tileDots<V, R, 1>(k, a, sa1, b + j * sb2, sb2, c + j * sc2, sc1, sc2);
}

template <typename V, int MR, int NC>
static inline __attribute__((always_inline)) void productDots(
    int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, const int64_t *sa,
    const float *b, const int64_t *sb, float *c, const int64_t *sc) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float *ab = a + bi * sa[0];
    const float *bb = b + bi * sb[0];
    float *cb = c + bi * sc[0];
    int64_t i = 0;
    for (; i + MR <= m; i += MR)
      rowDots<V, MR, NC>(n, k, ab + i * sa[1], sa[1], bb, sb[2], cb + i * sc[1], sc[1], sc[2]);
    for (; i < m; ++i)
      rowDots<V, 1, NC>(n, k, ab + i * sa[1], sa[1], bb, sb[2], cb + i * sc[1], sc[1], sc[2]);
  }
}

#if XLA_GPU_HOST_GEMM_TILES
typedef float Avx512Vec __attribute__((vector_size(64)));
typedef float Avx2Vec __attribute__((vector_size(32)));

// The tiles: AVX-512 has 32 vector registers (6 x 2 accumulators, or 4 x 4
// dot products), AVX2 16 (4 x 2, or 3 x 3).
__attribute__((target("avx512f,avx512vl,fma"))) static void rowsAvx512(
    int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, const int64_t *sa,
    const float *b, const int64_t *sb, float *c, const int64_t *sc) {
  productRows<Avx512Vec, 6, 2>(batch, m, n, k, a, sa, b, sb, c, sc);
}
__attribute__((target("avx512f,avx512vl,fma"))) static void dotsAvx512(
    int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, const int64_t *sa,
    const float *b, const int64_t *sb, float *c, const int64_t *sc) {
  productDots<Avx512Vec, 4, 4>(batch, m, n, k, a, sa, b, sb, c, sc);
}
__attribute__((target("avx2,fma"))) static void rowsAvx2(
    int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, const int64_t *sa,
    const float *b, const int64_t *sb, float *c, const int64_t *sc) {
  productRows<Avx2Vec, 4, 2>(batch, m, n, k, a, sa, b, sb, c, sc);
}
__attribute__((target("avx2,fma"))) static void dotsAvx2(
    int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, const int64_t *sa,
    const float *b, const int64_t *sb, float *c, const int64_t *sc) {
  productDots<Avx2Vec, 3, 3>(batch, m, n, k, a, sa, b, sb, c, sc);
}
#endif  // XLA_GPU_HOST_GEMM_TILES

// The widest f32 vector the GEMM command's tiles use here: 16 (AVX-512),
// 8 (AVX2 with FMA), 0 (the plain loop). XLA_GPU_HOST_GEMM_VECTOR=avx2 or
// =none caps it (to run the narrower code on a wider host).
int64_t detectGemmWidth() {
  int64_t width = 0;
#if XLA_GPU_HOST_GEMM_TILES
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
    width = 16;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    width = 8;
#endif
  if (const char *cap = std::getenv("XLA_GPU_HOST_GEMM_VECTOR")) {
    if (std::strcmp(cap, "none") == 0) width = 0;
    else if (std::strcmp(cap, "avx2") == 0 && width > 8) width = 8;
  }
  return width;
}

// The dot-product tiles pay for their sums across lanes from this k on
// (NATIVE_GEMM_DOTS_MIN_K in host_executor.py).
constexpr int64_t kDotsMinK = 256;
// Longer products take the plain loop: a packed panel of rhs (k rows of two
// vectors, kept per thread) stays within 1 MiB (NATIVE_GEMM_TILE_MAX_K).
constexpr int64_t kTileMaxK = 8192;

int64_t gemmWidth() {
  static const int64_t width = detectGemmWidth();
  return width;
}

using KernelFn = void (*)(void **);
using Callback = int (*)(int64_t);

struct Machine {
  const int64_t *code;
  int64_t length;
  char *const *bases;
  int64_t num_bases;
  void *const *kernels;
  int64_t num_kernels;
  int64_t *probes;
  int64_t num_probes;
  Callback callback;
  int64_t *stats;
  const XlaGpuHostControl *control;
  int64_t error_at = -1;   // the word where a malformed command starts
  int64_t next_poll_ns = 0;
  std::vector<void *> args;

  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Between two iterations of a while loop: stop when the caller's poll
  // says so or its deadline has passed (checked at most every
  // kPollIntervalNs).
  int64_t checkpoint() {
    if (control == nullptr) return kOk;
    const int64_t now = nowNs();
    if (now < next_poll_ns) return kOk;
    next_poll_ns = now + kPollIntervalNs;
    if (control->deadline_ns > 0 && now >= control->deadline_ns) return kDeadlineExceeded;
    if (control->poll != nullptr && control->poll(control->arg) != 0) return kInterrupted;
    return kOk;
  }

  bool address(int64_t alloc, int64_t offset, char **out) const {
    if (alloc < 0 || alloc >= num_bases || bases[alloc] == nullptr || offset < 0)
      return false;
    *out = bases[alloc] + offset;
    return true;
  }

  int64_t fail(int64_t at) {
    error_at = at;
    return kMalformed;
  }

  // The addresses of `nargs` (alloc, offset) pairs at `pairs`, into `args`.
  bool gather(const int64_t *pairs, int64_t nargs) {
    args.resize(static_cast<size_t>(nargs > 0 ? nargs : 1));
    for (int64_t i = 0; i < nargs; ++i) {
      char *p;
      if (!address(pairs[2 * i], pairs[2 * i + 1], &p)) return false;
      args[i] = p;
    }
    return true;
  }

  // Probe words are read and written with relaxed atomics: runs of one
  // program on several threads share them, and a lost update only moves
  // the choice by a run.
  static int64_t load(const int64_t *word) { return __atomic_load_n(word, __ATOMIC_RELAXED); }
  static void store(int64_t *word, int64_t value) {
    __atomic_store_n(word, value, __ATOMIC_RELAXED);
  }

  void runKernel(const int64_t *w, bool split) {
    if (split && XlaGpuHostRunBlocks(kernels[w[2]], args.data(), w[3], w[4], w[5]) == 0)
      return;
    reinterpret_cast<KernelFn>(kernels[w[1]])(args.data());
  }

  // SPLIT: one thread or block ranges, as the probe slot says (see the
  // encoding above).
  void runSplitKernel(const int64_t *w) {
    int64_t *slot = probes + w[6] * kProbeWords;
    const int64_t runs = w[7], reprobe = w[8];
    int64_t mode = load(slot + kMode);
    if (mode != kProbing) {
      runKernel(w, mode == kSplit);
      int64_t since = load(slot + kRunsSinceChoice) + 1;
      if (since >= reprobe) {
        for (int64_t i = 0; i < kProbeWords; ++i) store(slot + i, 0);
      } else {
        store(slot + kRunsSinceChoice, since);
      }
      return;
    }
    const bool split = load(slot + kWholeRuns) >= runs;
    auto start = std::chrono::steady_clock::now();
    runKernel(w, split);
    int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start).count();
    int64_t *count = slot + (split ? kSplitRuns : kWholeRuns);
    int64_t *best = slot + (split ? kSplitBestNs : kWholeBestNs);
    int64_t done = load(count);
    if (done == 0 || ns < load(best)) store(best, ns);
    store(count, done + 1);
    if (split && done + 1 >= runs) {
      store(slot + kRunsSinceChoice, 0);
      store(slot + kMode, load(slot + kSplitBestNs) < load(slot + kWholeBestNs) ? kSplit
                                                                              : kWhole);
    }
  }

  // Runs the commands in [begin, end).
  int64_t run(int64_t begin, int64_t end) {
    int64_t pc = begin;
    while (pc < end) {
      const int64_t at = pc;
      const int64_t *w = code + pc;
      auto need = [&](int64_t words) { return words >= 0 && pc + words <= end; };
      switch (w[0]) {
      case kKernel: {
        if (!need(3)) return fail(at);
        int64_t fn = w[1], nargs = w[2];
        if (fn < 0 || fn >= num_kernels || nargs < 0 || !need(3 + 2 * nargs) ||
            !gather(w + 3, nargs))
          return fail(at);
        reinterpret_cast<KernelFn>(kernels[fn])(args.data());
        stats[kKernels] += 1;
        pc += 3 + 2 * nargs;
        break;
      }
      case kSplitKernel: {
        if (!need(9)) return fail(at);
        int64_t nargs = w[3];
        if (w[1] < 0 || w[1] >= num_kernels || w[2] < 0 || w[2] >= num_kernels ||
            nargs < 0 || w[4] < 0 || w[5] < 1 || w[6] < 0 || w[6] >= num_probes ||
            probes == nullptr || w[7] < 1 || w[8] < 1 || !need(9 + 2 * nargs) ||
            !gather(w + 9, nargs))
          return fail(at);
        runSplitKernel(w);
        stats[kKernels] += 1;
        pc += 9 + 2 * nargs;
        break;
      }
      case kCopy: {
        if (!need(6)) return fail(at);
        char *dst, *src;
        if (!address(w[1], w[2], &dst) || !address(w[3], w[4], &src) || w[5] < 0)
          return fail(at);
        if (dst != src && w[5] > 0) std::memmove(dst, src, static_cast<size_t>(w[5]));
        stats[kCopies] += 1;
        pc += 6;
        break;
      }
      case kMemset: {
        if (!need(6)) return fail(at);
        char *dst;
        int64_t width = w[4], count = w[5];
        if (!address(w[1], w[2], &dst) || count < 0) return fail(at);
        uint32_t pattern = static_cast<uint32_t>(w[3]);
        if (width == 1) {
          std::memset(dst, static_cast<int>(pattern & 0xff), static_cast<size_t>(count));
        } else if (width == 2) {
          uint16_t v = static_cast<uint16_t>(pattern);
          for (int64_t i = 0; i < count; ++i) std::memcpy(dst + 2 * i, &v, 2);
        } else if (width == 4) {
          for (int64_t i = 0; i < count; ++i) std::memcpy(dst + 4 * i, &pattern, 4);
        } else {
          return fail(at);
        }
        stats[kMemsets] += 1;
        pc += 6;
        break;
      }
      case kWhile: {
        if (!need(5)) return fail(at);
        char *pred;
        int64_t cond_len = w[3], body_len = w[4];
        if (!address(w[1], w[2], &pred) || cond_len < 0 || body_len < 0 ||
            !need(5 + cond_len + body_len))
          return fail(at);
        int64_t cond = pc + 5, body = cond + cond_len, next = body + body_len;
        for (;;) {
          if (int64_t rc = run(cond, body)) return rc;
          if (*reinterpret_cast<const uint8_t *>(pred) == 0) break;
          if (int64_t rc = run(body, next)) return rc;
          stats[kWhileIterations] += 1;
          if (int64_t rc = checkpoint()) return rc;
        }
        pc = next;
        break;
      }
      case kFor: {
        if (!need(3)) return fail(at);
        int64_t count = w[1], body_len = w[2];
        if (count < 0 || body_len < 0 || !need(3 + body_len)) return fail(at);
        int64_t body = pc + 3, next = body + body_len;
        for (int64_t i = 0; i < count; ++i) {
          if (int64_t rc = run(body, next)) return rc;
          stats[kWhileIterations] += 1;
          if (int64_t rc = checkpoint()) return rc;
        }
        pc = next;
        break;
      }
      case kConditional: {
        if (!need(5)) return fail(at);
        char *selector;
        int64_t is_pred = w[3], n = w[4];
        if (!address(w[1], w[2], &selector) || n < 1 || !need(5 + n)) return fail(at);
        int64_t total = 0;
        for (int64_t b = 0; b < n; ++b) {
          if (w[5 + b] < 0) return fail(at);
          total += w[5 + b];
        }
        if (!need(5 + n + total)) return fail(at);
        int64_t index;
        if (is_pred) {
          index = *reinterpret_cast<const uint8_t *>(selector) ? 0 : 1;
        } else {
          int32_t value;
          std::memcpy(&value, selector, 4);
          index = (value < 0 || value >= n) ? n - 1 : value;
        }
        if (index >= n) index = n - 1;
        int64_t start = pc + 5 + n;
        for (int64_t b = 0; b < index; ++b) start += w[5 + b];
        if (int64_t rc = run(start, start + w[5 + index])) return rc;
        pc += 5 + n + total;
        break;
      }
      case kCall: {
        if (!need(2) || callback == nullptr) return fail(at);
        if (callback(w[1]) != 0) return kCallbackFailed;
        pc += 2;
        break;
      }
      case kGemm: {
        if (!need(21)) return fail(at);
        if (int64_t rc = gemm(w)) return rc == kMalformed ? fail(at) : rc;
        stats[kGemms] += 1;
        pc += 21;
        break;
      }
      case kCount: {
        if (!need(2) || w[1] < 0 || w[1] >= kNumStats) return fail(at);
        stats[w[1]] += 1;
        pc += 2;
        break;
      }
      default:
        return fail(at);
      }
    }
    return kOk;
  }

  template <typename T>
  static void multiply(int64_t batch, int64_t m, int64_t n, int64_t k, const T *a,
                       const int64_t *sa, const T *b, const int64_t *sb, T *c,
                       const int64_t *sc) {
    // Row i of the output accumulates lhs[i,p] * row p of rhs: the inner
    // loop runs along a row of rhs and of the output, which vectorizes when
    // both are contiguous (the common row-major case).
    for (int64_t bi = 0; bi < batch; ++bi) {
      const T *ab = a + bi * sa[0];
      const T *bb = b + bi * sb[0];
      T *cb = c + bi * sc[0];
      for (int64_t i = 0; i < m; ++i) {
        T *row = cb + i * sc[1];
        if (sc[2] == 1) {
          for (int64_t j = 0; j < n; ++j) row[j] = T(0);
        } else {
          for (int64_t j = 0; j < n; ++j) row[j * sc[2]] = T(0);
        }
        for (int64_t p = 0; p < k; ++p) {
          const T x = ab[i * sa[1] + p * sa[2]];
          const T *brow = bb + p * sb[1];
          if (sc[2] == 1 && sb[2] == 1) {
            for (int64_t j = 0; j < n; ++j) row[j] += x * brow[j];
          } else {
            for (int64_t j = 0; j < n; ++j) row[j * sc[2]] += x * brow[j * sb[2]];
          }
        }
      }
    }
  }

  int64_t gemm(const int64_t *w) {
    int64_t type = w[1], batch = w[2], m = w[3], n = w[4], k = w[5];
    if (batch < 0 || m < 0 || n < 0 || k < 0 || (type != 0 && type != 1)) return kMalformed;
    char *lhs, *rhs, *out;
    if (!address(w[6], w[7], &lhs) || !address(w[11], w[12], &rhs) ||
        !address(w[16], w[17], &out))
      return kMalformed;
#if XLA_GPU_HOST_GEMM_TILES
    if (type == 0 && gemmWidth() > 0 && w[20] == 1 && k <= kTileMaxK) {
      // Rows of out contiguous: register tiles. Dot products along k where
      // both operands are contiguous along it, k is long and the rows too
      // few to pay for packing a transposed rhs; else row tiles.
      const int64_t *sa = w + 8, *sb = w + 13, *sc = w + 18;
      const bool dots = sa[2] == 1 && sb[1] == 1 && sb[2] != 1 && k >= kDotsMinK && m < 64;
      const float *a = reinterpret_cast<const float *>(lhs);
      const float *b = reinterpret_cast<const float *>(rhs);
      float *c = reinterpret_cast<float *>(out);
      if (gemmWidth() >= 16)
        (dots ? dotsAvx512 : rowsAvx512)(batch, m, n, k, a, sa, b, sb, c, sc);
      else
        (dots ? dotsAvx2 : rowsAvx2)(batch, m, n, k, a, sa, b, sb, c, sc);
    } else
#endif
    if (type == 0)
      multiply(batch, m, n, k, reinterpret_cast<const float *>(lhs), w + 8,
               reinterpret_cast<const float *>(rhs), w + 13, reinterpret_cast<float *>(out),
               w + 18);
    else
      multiply(batch, m, n, k, reinterpret_cast<const double *>(lhs), w + 8,
               reinterpret_cast<const double *>(rhs), w + 13, reinterpret_cast<double *>(out),
               w + 18);
    return kOk;
  }
};

}  // namespace
}  // namespace xla_gpu_host

// The f32 vector width of the GEMM command's tiles on this host (16, 8, or
// 0 for the plain loop), for the encoder's choice of what products to keep.
XLA_GPU_HOST_EXPORT int64_t XlaGpuHostGemmVectorWidth() { return xla_gpu_host::gemmWidth(); }

// Runs `code[0, length)` on the allocations at `bases` (null: unused) with
// the kernel entry points `kernels` and the SPLIT kernels' `num_probes`
// probe slots at `probes` (kProbeWords int64 words each); `callback(i)` runs
// the thunks Python keeps; `control` (may be null) can stop while loops.
// `stats` (8 counters) is added to. Returns 0; 1 when a callback failed
// (Python holds its exception); 2 for a malformed command, whose first
// word's index is stored in `*error_at`; 3 when `control->poll` asked to
// stop (the caller holds why); 4 when `control->deadline_ns` passed.
XLA_GPU_HOST_EXPORT int64_t XlaGpuHostExecute(const int64_t *code, int64_t length,
                                              char *const *bases, int64_t num_bases,
                                              void *const *kernels, int64_t num_kernels,
                                              int64_t *probes, int64_t num_probes,
                                              int (*callback)(int64_t), int64_t *stats,
                                              int64_t *error_at,
                                              const XlaGpuHostControl *control) {
  xla_gpu_host::Machine machine{code,     length,     bases,    num_bases, kernels,
                                num_kernels, probes,  num_probes, callback, stats,
                                control};
  if (length < 0) return xla_gpu_host::kMalformed;
  int64_t rc = machine.run(0, length);
  if (error_at != nullptr) *error_at = machine.error_at;
  return rc;
}
