//===- host_blocks.cc - a cpu-target kernel's blocks on several host threads ===//
//
// A cpu-target kernel `k` exports `k_host_blocks(a0, ..., aN-1, first, end)`,
// which runs blocks [first, end) of its grid. Splitting a grid over host
// threads pays only when handing a range to another thread is cheap next to
// the kernel: through Python's ThreadPoolExecutor it costs 40-80 us (a
// queue, a lock, a futex wake of a sleeping thread, a future), which on a
// 2-core machine ate most of the gain on 100-500 us kernels.
//
// `XlaGpuHostRunBlocks` splits [0, blocks) into kChunksPerPart chunks for
// each of its `parts` threads (the caller and pool workers), which each
// thread claims one after another from a shared counter until none is
// left. On cores shared with other processes a worker may be descheduled,
// or still asleep, when the job is posted: with equal fixed ranges the
// caller then spun until that worker got a core back and ran its whole
// range; with chunks the running threads take over what it has not
// claimed, and the caller waits at most for the chunks a worker holds.
// Workers wait for the next job spinning for a while (kernels come back to
// back in a program or a benchmark loop) and then sleep on a condition
// variable. One job at a time: a caller that finds the pool busy (another
// Python thread's kernel) runs its whole grid itself rather than queueing
// behind it.
//
// The kernel's arguments are passed as they are to `k_host_blocks`, whose C
// signature has one pointer per argument: calls are instantiated for up to
// kMaxArgs arguments; kernels with more return kTooManyArguments and run
// from Python.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <utility>
#include <vector>

#define XLA_GPU_HOST_EXPORT extern "C" __attribute__((visibility("default")))

namespace xla_gpu_host {
namespace {

constexpr int64_t kMaxArgs = 64;
constexpr int64_t kMaxWorkers = 8;
// Result codes of XlaGpuHostRunBlocks.
constexpr int64_t kRan = 0, kTooManyArguments = 1, kBadRange = 2;
// How long an idle worker spins before it sleeps: long enough for the
// next launch of a program or a loop, short enough not to hold a core
// another process wants.
constexpr auto kSpin = std::chrono::microseconds(100);
// Polls of the job word between looks at the clock.
constexpr int kPollsPerClockRead = 64;
// The low bits of the pool's generation word hold the job's part count.
constexpr int kPartBits = 8;
constexpr uint64_t kPartMask = (uint64_t{1} << kPartBits) - 1;
// Chunks of a job per thread taking part: enough that a thread that lost
// its core holds back little, few enough that claiming stays negligible.
constexpr int64_t kChunksPerPart = 4;
// The claim word: the job's tag (24 bits), its chunk count and the next
// unclaimed chunk (20 bits each), so that whether a claim is valid is known
// without reading the job.
constexpr int kFieldBits = 20;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
constexpr int kTagShift = 2 * kFieldBits;
constexpr uint64_t kTagMask = (uint64_t{1} << (64 - kTagShift)) - 1;

using BlocksCall = void (*)(void *fn, void *const *args, int64_t first, int64_t end);

template <size_t... I>
void callBlocks(void *fn, void *const *args, int64_t first, int64_t end,
                std::index_sequence<I...>) {
  using Fn = void (*)(decltype((void)I, static_cast<void *>(nullptr))..., int64_t, int64_t);
  reinterpret_cast<Fn>(fn)(args[I]..., first, end);
}

template <size_t N>
void callBlocksN(void *fn, void *const *args, int64_t first, int64_t end) {
  callBlocks(fn, args, first, end, std::make_index_sequence<N>());
}

template <size_t... N>
constexpr auto makeCallTable(std::index_sequence<N...>) {
  return std::array<BlocksCall, sizeof...(N)>{&callBlocksN<N>...};
}

const auto kCalls = makeCallTable(std::make_index_sequence<kMaxArgs + 1>());

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

struct Job {
  BlocksCall call = nullptr;
  void *fn = nullptr;
  void *const *args = nullptr;
  int64_t blocks = 0;
  int64_t parts = 0;
  int64_t chunks = 0;
};

class BlockPool {
 public:
  explicit BlockPool(int64_t workers) {
    for (int64_t w = 1; w <= workers; ++w) threads_.emplace_back([this, w] { work(w); });
  }
  // The pool lives as long as the process: its threads are never joined
  // (exit ends them; joining them in a static destructor could deadlock).
  int64_t workers() const { return static_cast<int64_t>(threads_.size()); }

  // Runs `job` split into job.chunks ranges that this thread and up to
  // job.parts - 1 workers claim. False when the pool is busy with another
  // caller's job.
  bool run(const Job &job) {
    std::unique_lock<std::mutex> submit(submit_, std::try_to_lock);
    if (!submit.owns_lock()) return false;
    // A worker reads job_ only after claiming one of its chunks under this
    // job's tag, and the caller returns (and may write the next job) only
    // after every chunk was claimed and no worker is still inside: no
    // worker reads job_ while it changes.
    job_ = job;
    uint64_t next = ((generation_.load(std::memory_order_relaxed) >> kPartBits) + 1)
                    << kPartBits;
    const uint64_t tag = (next >> kPartBits) & kTagMask;
    claims_.store((tag << kTagShift) | (static_cast<uint64_t>(job.chunks) << kFieldBits),
                  std::memory_order_seq_cst);
    // The job's number of parts travels in the low bits of the generation,
    // so that a worker with no part never touches job_.
    generation_.store(next | static_cast<uint64_t>(job.parts), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_);
      wake_.notify_all();
    }
    runChunks(tag);
    while (inside_.load(std::memory_order_acquire) > 0) cpuRelax();
    return true;
  }

 private:
  // Claims and runs chunks of the job tagged `tag` until none is left (or
  // the claim word carries another tag: that job is over). job_ is read
  // only while holding one of its chunks, when its caller cannot return.
  void runChunks(uint64_t tag) {
    uint64_t word = claims_.load(std::memory_order_acquire);
    for (;;) {
      if ((word >> kTagShift) != tag) return;
      const uint64_t chunk = word & kFieldMask;
      const uint64_t chunks = (word >> kFieldBits) & kFieldMask;
      if (chunk >= chunks) return;
      if (!claims_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
        continue;
      const Job &job = job_;
      const int64_t first = job.blocks * static_cast<int64_t>(chunk) / job.chunks;
      const int64_t end = job.blocks * (static_cast<int64_t>(chunk) + 1) / job.chunks;
      if (first < end) job.call(job.fn, job.args, first, end);
      word = claims_.load(std::memory_order_acquire);
    }
  }

  void work(int64_t index) {
    // Not the current value: a worker thread may start after the first job
    // was posted, and must still take its part.
    uint64_t seen = 0;
    for (;;) {
      uint64_t now = seen;
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int poll = 1; now == seen; ++poll) {
        cpuRelax();
        now = generation_.load(std::memory_order_acquire);
        if (poll % kPollsPerClockRead == 0 && std::chrono::steady_clock::now() >= until) break;
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(sleep_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] {
          return generation_.load(std::memory_order_seq_cst) != seen;
        });
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        now = generation_.load(std::memory_order_acquire);
      }
      seen = now;
      if (index < static_cast<int64_t>(now & kPartMask)) {
        inside_.fetch_add(1, std::memory_order_seq_cst);
        // A job posted since is taken on the next turn of the loop; this
        // one's chunks are claimed under its tag, so a worker arriving
        // after its caller returned claims none.
        if (generation_.load(std::memory_order_seq_cst) == now)
          runChunks((now >> kPartBits) & kTagMask);
        inside_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  std::vector<std::thread> threads_;
  std::mutex submit_;
  std::mutex sleep_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> claims_{0};
  std::atomic<int64_t> inside_{0};
  std::atomic<int64_t> sleepers_{0};
  Job job_;
};

std::atomic<BlockPool *> currentPool{nullptr};
std::mutex poolCreation;

BlockPool &pool() {
  BlockPool *existing = currentPool.load(std::memory_order_acquire);
  if (existing != nullptr) return *existing;
  std::lock_guard<std::mutex> lock(poolCreation);
  existing = currentPool.load(std::memory_order_relaxed);
  if (existing == nullptr) {
    // A forked child has none of the parent's worker threads: it starts a
    // pool of its own on its first split (the parent's is never freed,
    // its threads own it).
    static const bool forgetOnFork = [] {
      pthread_atfork(nullptr, nullptr,
                     [] { currentPool.store(nullptr, std::memory_order_relaxed); });
      return true;
    }();
    (void)forgetOnFork;
    unsigned cores = std::thread::hardware_concurrency();
    int64_t workers = std::clamp<int64_t>(cores > 1 ? cores - 1 : 1, 1, kMaxWorkers - 1);
    existing = new BlockPool(workers);
    currentPool.store(existing, std::memory_order_release);
  }
  return *existing;
}

}  // namespace
}  // namespace xla_gpu_host

// Runs blocks [0, blocks) of the kernel whose `k_host_blocks` entry is
// `blocks_fn` on `args` (nargs pointers) on this thread and up to parts - 1
// of the pool's, which claim kChunksPerPart chunks a thread (parts is
// capped at the pool's size + 1; a busy pool, or parts <= 1, runs them all
// here). Returns 0, 1 when the kernel has more
// than kMaxArgs arguments (nothing ran), 2 for a negative count.
XLA_GPU_HOST_EXPORT int64_t XlaGpuHostRunBlocks(void *blocks_fn, void *const *args,
                                                int64_t nargs, int64_t blocks,
                                                int64_t parts) {
  using namespace xla_gpu_host;
  if (nargs < 0 || blocks < 0 || blocks_fn == nullptr) return kBadRange;
  if (nargs > kMaxArgs) return kTooManyArguments;
  Job job{kCalls[static_cast<size_t>(nargs)], blocks_fn, args, blocks, 1, 1};
  if (parts > 1 && blocks > 1) {
    BlockPool &workers = pool();
    job.parts = std::min({parts, workers.workers() + 1, blocks});
    job.chunks = std::min(job.parts * kChunksPerPart, blocks);
    if (workers.run(job)) return kRan;
    job.parts = 1;
  }
  job.call(blocks_fn, args, 0, blocks);
  return kRan;
}

// The number of threads a split kernel can use: the pool's and the caller's.
XLA_GPU_HOST_EXPORT int64_t XlaGpuHostBlockThreads() {
  return xla_gpu_host::pool().workers() + 1;
}
