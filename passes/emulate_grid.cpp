//===- emulate_grid.cpp - a kernel's launch grid as loops on the host -----===//
//
// The cpu target runs the emitted kernel with its GPU launch dimensions on
// one host thread. A kernel @k becomes
//
//   func @k_host_blocks(args..., %first, %end) {     // blocks [first, end)
//     <per-block buffers: shared memory, values kept across barriers>
//     scf.for %block = %first to %end {
//       scf.for %thread = 0 to T { phase 0 }         // up to the 1st barrier
//       scf.for %thread = 0 to T { phase 1 }         // up to the 2nd one
//       ...
//     }
//   }
//   func @k_host(%args) {                             // the whole grid
//     call @k_host_blocks(%args[0], ..., %args[N-1], 0, B)
//   }
//
// @k_host runs on one host thread. A kernel with atomics gets a private
// copy for it, @k_host_serial_blocks, whose atomics are plain loads and
// stores (no other thread runs then); @k_host_blocks keeps them for block
// ranges that run side by side.
//
// Phases. The kernel's body is one block of top-level ops (scf still
// structured), and its barriers are among those ops: they cut the body into
// phases, each run by every thread of the block before the next starts,
// which is what a barrier guarantees on the GPU. A value defined in phase i
// and used in phase j > i is
//   - recomputed in phase j when it is a pure, region-free computation of
//     thread/block ids, constants and kernel arguments (at most
//     kMaxRecomputeDepth ops deep): the index arithmetic the emitters share
//     between the loops around a barrier;
//   - otherwise kept per thread: phase i stores it at the end of its thread
//     iteration into a buffer with one slot per thread, phase j loads it
//     back at the start of its own. Loads, calls and scf results are always
//     kept (memory may have changed at the barrier).
// Grid queries (gpu.thread_id, ...) are not values of a phase: every use is
// replaced by the loop counters (or launch constants) of the phase it is in.
//
// Thread loops. The innermost loop, over consecutive threads, is the one
// LLVM vectorizes (consecutive threads in consecutive SIMD lanes); the
// values kept per thread are arrays indexed by the thread, read and
// written contiguously by it. Where a phase divides the thread id by a
// divisor or multiple of 32, or takes it modulo one (the emitters' tiles:
// thread / 32 picks a row, thread % 32 a column) and the block is whole
// warps, its loop becomes two, over the warps and, inside, over the 32
// lanes (thread = 32 warp + lane), and those divisions become expressions
// of the two counters, so that addresses are affine in the lane.
//
// Wrapping remainders. A power-of-two remainder that varies with the
// thread loop's counter and wraps inside the loop (XLA's rotated tiles:
// slot = (column + row) mod 32) is rewritten as `x < 2^k ? x : x - 2^k`
// where x < 2^(k+1), and a loop with one that cannot be bounded so is not
// vectorized: LLVM 22's loop vectorizer stores and loads the addresses
// built from such a remainder as consecutive ones once a value of an
// enclosing loop is added (see guardWrappingRemainders).
//
// Uniform loops. A top-level scf.for with constant bounds (a thread's loop
// over its elements: the same trip count in every thread) would leave the
// thread loop with an inner loop, which LLVM does not vectorize. It is
// lifted instead: it gets a phase of its own, run as
//   scf.for %i = lb to ub step s {                  // the kernel's loop
//     for %thread = 0 to T { body(%i) }             // its body, per thread
//   }
// with the loop-carried values in buffers of one slot per thread (the
// initial values on the first iteration), read after it like kept values.
// Cutting a thread's code into phases reorders threads only relative to
// each other, which the GPU does not order either (without a barrier,
// threads that share data race).
//
// Loops with barriers. A top-level scf.for with constant bounds whose body
// has barriers among its own ops (the sort's steps, one per iteration)
// is cut the same way inside: the phases of its body run, in order, inside
// a block-level loop over its counter,
//   scf.for %i = lb to ub step s {                  // the kernel's loop
//     for %thread = 0 to T { phase k(%i) }          // up to its 1st barrier
//     for %thread = 0 to T { phase k+1(%i) }        // ...
//   }
// The loop's start and end, and each iteration's end, are barriers too
// (every thread finishes the phase before the next starts), which orders
// threads more than the GPU does, never less. Its loop-carried values are
// buffers of one slot per thread: a phase reads its thread's slot (the
// initial value on the first iteration), the loop's last phase with ops
// writes the next value, and the code after the loop reads the final one.
// Warp shuffles in such a loop are not emulated (an error).
//
// Warp shuffles. An xla_gpu.shuffle_reduce cuts the kernel like a barrier
// (every lane of a warp must have its operands before any lane reads the
// others'). The phase before stores each thread's operands into a buffer
// with one slot per thread; between the two phases, one loop over the
// block's threads per distance d (max_distance, ..., 2, 1) computes
//   next[t] = combiner(cur[t], cur[t xor d])
// for every thread t, which is lane t % 32's step of the GPU's butterfly
// (t xor d stays in t's warp), each lane with its own values first, as the
// GPU's lanes call it; `cur` and `next` alternate between two buffers. The
// phases after read their thread's slot of the last one. The results are
// therefore bit-identical to the GPU's, whatever the combiner. Lanes that
// exchange with an inactive lane have no defined result on the GPU: blocks
// must be whole groups of 2 * max_distance lanes. When the combiner is symmetric (combiner(a, b) =
// combiner(b, a), proven on its body: sums, products, min/max), every lane
// of a group of 2 * max_distance lanes ends with its first lane's value,
// and only the calls that value depends on run (2m - 1 per group of 2m
// lanes, in the GPU's order, bit-identical too); threads then read their
// group's first slot. Shuffles that follow each other with nothing between
// (a multi-output reduction's rows), none of another's results, run between
// the same two phases: the phase before stores all their operands, and the
// symmetric ones of one max_distance share the loops over groups and
// distances (each with its own buffers and calls, in its own order).
//
// First-lane phases. A phase whose only writes are under `if (lane == 0)`
// (or thread 0: the reductions' stores of a row's result) runs that lane
// alone, its loop over the lanes cut to one iteration.
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "RangeInference.h"
#include "ScalarizeVectors.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_EMULATEGRIDPASS
#include "Passes.h.inc"

namespace {

constexpr unsigned kSharedMemorySpace = 3;
constexpr int64_t kWarpSize = 32;
// The longest chain of pure ops recomputed in a later phase rather than kept.
constexpr int kMaxRecomputeDepth = 16;
// A thread loop with more conditional regions than this stays scalar.
// Vectorized, every lane runs every branch under a mask: a concatenate of
// 300 operands (a binary search over them, 299 scf.if) became a vector body
// holding all 300 loads, which took LLVM seconds to compile and ran slower
// than the scalar search.
constexpr int kMaxBranchesToVectorize = 16;

// Ops that read the thread's place in the launch grid.
bool isGridQuery(Operation *op) {
  return isa<gpu::ThreadIdOp, gpu::BlockIdOp, gpu::BlockDimOp, gpu::GridDimOp,
             gpu::LaneIdOp>(op);
}

// Where the threads of a block wait for each other; the kernel is cut there.
enum class SyncKind {
  kBlockBarrier,    // gpu.barrier: nothing to do between the phases
  kWarpCollective,  // xla_gpu.shuffle_reduce: the butterfly between them
  kLiftedLoop,      // no sync: a uniform loop runs around its own phase
};

// A top-level scf.for whose bounds are constants (the same for every
// thread) and that runs at least twice: it becomes a loop around its own
// phase (see "Uniform loops" in the header).
struct UniformLoop {
  int64_t lower, upper, step;
};
// The bounds of `loop` when they are constants with a positive step, and
// its results values that a buffer can keep.
std::optional<UniformLoop> uniformBounds(scf::ForOp loop) {
  APInt lower, upper, step;
  if (!matchPattern(loop.getLowerBound(), m_ConstantInt(&lower)) ||
      !matchPattern(loop.getUpperBound(), m_ConstantInt(&upper)) ||
      !matchPattern(loop.getStep(), m_ConstantInt(&step)))
    return std::nullopt;
  UniformLoop bounds{lower.getSExtValue(), upper.getSExtValue(), step.getSExtValue()};
  if (bounds.step <= 0) return std::nullopt;
  for (Type type : loop.getResultTypes())
    if (!type.isIndex() && !LLVM::isCompatibleType(type)) return std::nullopt;
  return bounds;
}

bool hasOwnBarrier(scf::ForOp loop) {
  return llvm::any_of(loop.getBody()->without_terminator(),
                      [](Operation &op) { return isa<gpu::BarrierOp>(op); });
}

std::optional<UniformLoop> liftableLoop(Operation *op) {
  auto loop = dyn_cast<scf::ForOp>(op);
  if (!loop || hasOwnBarrier(loop)) return std::nullopt;
  std::optional<UniformLoop> bounds = uniformBounds(loop);
  if (!bounds || bounds->upper - bounds->lower < 2 * bounds->step) return std::nullopt;
  return bounds;
}

// A scf.for whose body has barriers among its own ops and whose bounds
// are constants (every thread reaches each barrier the same number of
// times), run at least once: at the kernel's top level, its body is cut
// into phases inside a block-level loop (see "Loops with barriers").
std::optional<UniformLoop> barrierLoop(Operation *op) {
  auto loop = dyn_cast<scf::ForOp>(op);
  if (!loop || !hasOwnBarrier(loop)) return std::nullopt;
  std::optional<UniformLoop> bounds = uniformBounds(loop);
  if (!bounds || bounds->upper <= bounds->lower) return std::nullopt;
  return bounds;
}

std::optional<SyncKind> getSyncKind(Operation *op) {
  if (isa<gpu::BarrierOp>(op)) return SyncKind::kBlockBarrier;
  if (isa<ShuffleReduceOp>(op)) return SyncKind::kWarpCollective;
  return std::nullopt;
}

// Kernels: functions marked xla.entry, else public ones without results
// (xla-lower-to-llvm's rule).
SmallVector<func::FuncOp> findKernels(ModuleOp module) {
  bool anyMarked = false;
  for (auto f : module.getOps<func::FuncOp>()) anyMarked |= f->hasAttr("xla.entry");
  SmallVector<func::FuncOp> kernels;
  for (auto f : module.getOps<func::FuncOp>()) {
    bool isKernel = anyMarked ? f->hasAttr("xla.entry")
                              : f.isPublic() && f.getNumResults() == 0 &&
                                    !f.isExternal();
    if (isKernel) kernels.push_back(f);
  }
  return kernels;
}

// An error about a kernel as a whole, at its location (without the whole
// function printed after it).
InFlightDiagnostic kernelError(func::FuncOp kernel) {
  return emitError(kernel.getLoc())
         << "xla-emulate-grid: kernel @" << kernel.getSymName() << ": ";
}

// The launch dimension that `IdOp x` counts (threads per block for
// gpu.thread_id, blocks for gpu.block_id): `requested` when positive, else
// one past the upper bound of the ids' xla.range (or upper_bound), else 1
// when the kernel never reads the id.
template <typename IdOp>
FailureOr<int64_t> launchDimension(func::FuncOp kernel, int64_t requested,
                                   StringRef option) {
  std::optional<int64_t> bound;  // exclusive
  Operation *unbounded = nullptr;
  WalkResult walk = kernel.walk([&](IdOp op) -> WalkResult {
    std::optional<int64_t> upper;
    if (auto range = getXlaRange(op)) upper = range->upper + 1;
    else if (auto attr = op.getUpperBound()) upper = attr->getSExtValue();
    if (op.getDimension() != gpu::Dimension::x) {
      if (upper && *upper > 1)
        return op.emitOpError("ranges beyond 0 in dimension ")
               << gpu::stringifyDimension(op.getDimension())
               << ": only one-dimensional (x) launches are emulated";
      return WalkResult::advance();
    }
    if (upper) bound = std::max(bound.value_or(0), *upper);
    else unbounded = op;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) return failure();
  if (requested < 0)
    return kernelError(kernel) << option << "=" << requested << " is negative";
  if (requested > 0) {
    if (bound && requested > *bound)
      return kernelError(kernel)
             << option << "=" << requested
             << " exceeds the xla.range of the kernel's ids, which allows "
             << *bound;
    return requested;
  }
  if (bound) return *bound;
  if (unbounded)
    return unbounded->emitOpError("has no xla.range: give the launch "
                                  "dimension to xla-emulate-grid (")
           << option << "=N)";
  return 1;
}

// Whether combiner(a..., b...) equals combiner(b..., a...) for all inputs,
// proven on the combiner's body: its ops (pure, no regions) printed as
// expressions of the arguments, operands of commutative ops in sorted
// order, must read the same with the two argument halves swapped.
// `addf(a, b)`, `maximumf(extf(a), extf(b))` are symmetric; a comparison
// of a with b (an argmax's tie-break) is not.
bool isSymmetricCombiner(func::FuncOp combiner) {
  constexpr size_t kMaxOps = 64, kMaxExpression = 4096;
  if (!combiner || combiner.isExternal() || !combiner.getBody().hasOneBlock())
    return false;
  Block &body = combiner.getBody().front();
  unsigned n = body.getNumArguments();
  if (n == 0 || n % 2 != 0 || body.getOperations().size() > kMaxOps) return false;
  for (Operation &op : body.without_terminator())
    if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op)) return false;
  auto expressions = [&](bool swapped) -> std::optional<SmallVector<std::string>> {
    llvm::DenseMap<Value, std::string> names;
    for (unsigned i = 0; i < n; ++i) {
      bool first = (i < n / 2) != swapped;
      names[body.getArgument(i)] = (first ? "a" : "b") + std::to_string(i % (n / 2));
    }
    auto print = [&](Operation &op) -> std::optional<std::string> {
      SmallVector<std::string> operands;
      for (Value v : op.getOperands()) {
        auto it = names.find(v);
        if (it == names.end()) return std::nullopt;
        operands.push_back(it->second);
      }
      if (op.hasTrait<OpTrait::IsCommutative>()) llvm::sort(operands);
      std::string text;
      llvm::raw_string_ostream os(text);
      os << op.getName() << op.getAttrDictionary() << "(";
      llvm::interleaveComma(operands, os);
      os << "):";
      llvm::interleaveComma(op.getResultTypes(), os);
      return text;
    };
    for (Operation &op : body.without_terminator()) {
      std::optional<std::string> text = print(op);
      if (!text || text->size() > kMaxExpression) return std::nullopt;
      for (OpResult result : op.getResults())
        names[result] = *text + "#" + std::to_string(result.getResultNumber());
    }
    std::optional<std::string> returned = print(*body.getTerminator());
    if (!returned) return std::nullopt;
    return SmallVector<std::string>{*returned};
  };
  auto plain = expressions(false), swapped = expressions(true);
  return plain && swapped && *plain == *swapped;
}

// Whether `value` is `thread` through casts (index_cast(ui), ext, trunc to
// at least 16 bits: thread ids are small and non-negative).
bool isThreadId(Value value, Value thread) {
  while (value != thread) {
    Operation *def = value.getDefiningOp();
    if (!def) return false;
    if (isa<arith::IndexCastUIOp, arith::IndexCastOp, arith::ExtUIOp,
            arith::ExtSIOp>(def) ||
        (isa<arith::TruncIOp>(def) && def->getResult(0).getType().getIntOrFloatBitWidth() >= 16))
      value = def->getOperand(0);
    else
      return false;
  }
  return true;
}

// Whether i1 `cond` holds only where `counter` is 0: `counter == 0`
// (through casts), or a conjunction with such a term.
bool holdsOnlyAtZero(Value cond, Value counter, int depth = 0) {
  constexpr int kMaxDepth = 8;
  if (depth > kMaxDepth) return false;
  Operation *def = cond.getDefiningOp();
  if (auto conjunction = dyn_cast_or_null<arith::AndIOp>(def))
    return holdsOnlyAtZero(conjunction.getLhs(), counter, depth + 1) ||
           holdsOnlyAtZero(conjunction.getRhs(), counter, depth + 1);
  auto cmp = dyn_cast_or_null<arith::CmpIOp>(def);
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq) return false;
  auto isZero = [](Value v) { return matchPattern(v, m_Zero()); };
  return (isThreadId(cmp.getLhs(), counter) && isZero(cmp.getRhs())) ||
         (isThreadId(cmp.getRhs(), counter) && isZero(cmp.getLhs()));
}

// Whether only the first iteration of `loop` (counter 0) has an effect
// beyond reading memory: every op that writes (or may: calls, unknown
// effects) is inside the `then` region of an scf.if whose condition holds
// only at counter 0. XLA's reductions end so: after the warp shuffle, lane
// 0 of each warp (or thread 0 of the block) stores the row's result, the
// other 31 lanes compute the same addresses and store nothing. Such a loop
// needs one iteration; the other lanes' reads have no effect.
bool onlyFirstIterationActs(scf::ForOp loop) {
  APInt lower, step;
  if (!matchPattern(loop.getLowerBound(), m_ConstantInt(&lower)) || !lower.isZero() ||
      !matchPattern(loop.getStep(), m_ConstantInt(&step)) || !step.isOne())
    return false;
  Value counter = loop.getInductionVar();
  bool anyGuarded = false;
  WalkResult walk = loop.getBody()->walk([&](Operation *op) -> WalkResult {
    if (op->hasTrait<OpTrait::HasRecursiveMemoryEffects>() ||
        op->hasTrait<OpTrait::IsTerminator>())
      return WalkResult::advance();  // its ops are visited themselves
    bool onlyReads = false;
    if (auto effects = dyn_cast<MemoryEffectOpInterface>(op)) {
      SmallVector<MemoryEffects::EffectInstance> list;
      effects.getEffects(list);
      onlyReads = llvm::all_of(list, [](const MemoryEffects::EffectInstance &e) {
        return isa<MemoryEffects::Read>(e.getEffect());
      });
    }
    if (onlyReads) return WalkResult::advance();
    for (Operation *parent = op->getParentOp(); parent != loop;
         parent = parent->getParentOp()) {
      auto branch = dyn_cast<scf::IfOp>(parent);
      if (branch && branch.getThenRegion().isAncestor(op->getParentRegion()) &&
          holdsOnlyAtZero(branch.getCondition(), counter)) {
        anyGuarded = true;
        return WalkResult::advance();
      }
    }
    return WalkResult::interrupt();
  });
  return !walk.wasInterrupted() && anyGuarded;
}

// The largest unsigned value `value` takes, from constants, scf.for
// counters with constant bounds and the unsigned arithmetic of index math
// (std::nullopt when unknown or when a step could wrap its type).
std::optional<uint64_t> unsignedUpperBound(Value value, int depth = 0) {
  constexpr int kMaxDepth = 24;
  if (depth > kMaxDepth || !value.getType().isIntOrIndex()) return std::nullopt;
  unsigned width = value.getType().isIndex() ? 64 : value.getType().getIntOrFloatBitWidth();
  uint64_t typeMax = width >= 64 ? UINT64_MAX : (uint64_t{1} << width) - 1;
  auto fits = [&](std::optional<uint64_t> v) -> std::optional<uint64_t> {
    if (v && *v <= typeMax) return v;
    return std::nullopt;
  };
  APInt cst;
  if (matchPattern(value, m_ConstantInt(&cst)))
    return cst.getActiveBits() <= 64 ? std::optional<uint64_t>(cst.getZExtValue())
                                     : std::nullopt;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto loop = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp());
    if (!loop || arg != loop.getInductionVar()) return std::nullopt;
    APInt lower, upper;
    if (!matchPattern(loop.getLowerBound(), m_ConstantInt(&lower)) ||
        !matchPattern(loop.getUpperBound(), m_ConstantInt(&upper)) ||
        lower.isNegative() || upper.isNegative() || upper.isZero())
      return std::nullopt;
    return fits(upper.getZExtValue() - 1);
  }
  Operation *op = value.getDefiningOp();
  if (!op) return std::nullopt;
  auto bound = [&](unsigned i) { return unsignedUpperBound(op->getOperand(i), depth + 1); };
  if (auto range = getXlaRange(op))
    return range->lower >= 0 ? std::optional<uint64_t>(range->upper) : std::nullopt;
  if (isa<arith::IndexCastUIOp, arith::ExtUIOp>(op)) return fits(bound(0));
  if (isa<arith::IndexCastOp, arith::TruncIOp>(op)) {
    // Exact when the operand's values fit in the result's non-negative half.
    std::optional<uint64_t> v = bound(0);
    if (v && *v <= typeMax / 2) return v;
    return std::nullopt;
  }
  if (isa<arith::AddIOp, arith::MulIOp>(op)) {
    std::optional<uint64_t> a = bound(0), b = bound(1);
    if (!a || !b) return std::nullopt;
    uint64_t result;
    bool overflow = isa<arith::AddIOp>(op) ? __builtin_add_overflow(*a, *b, &result)
                                           : __builtin_mul_overflow(*a, *b, &result);
    return overflow ? std::nullopt : fits(result);
  }
  if (isa<arith::DivUIOp, arith::ShRUIOp>(op)) {
    std::optional<uint64_t> a = bound(0);
    APInt divisor;
    if (!a || !matchPattern(op->getOperand(1), m_ConstantInt(&divisor)) ||
        divisor.getActiveBits() > 63)
      return a;
    uint64_t d = divisor.getZExtValue();
    if (isa<arith::DivUIOp>(op)) return d == 0 ? a : std::optional<uint64_t>(*a / d);
    return d >= 64 ? 0 : *a >> d;
  }
  if (isa<arith::MinUIOp>(op)) {
    std::optional<uint64_t> a = bound(0), b = bound(1);
    if (a && b) return std::min(*a, *b);
    return a ? a : b;
  }
  if (isa<arith::RemUIOp>(op)) {
    std::optional<uint64_t> a = bound(0), b = bound(1);
    if (b && *b > 0) return a ? std::min(*a, *b - 1) : *b - 1;
    return a;
  }
  if (isa<arith::AndIOp>(op)) {
    std::optional<uint64_t> a = bound(0), b = bound(1);
    if (a && b) return std::min(*a, *b);
    return a ? a : b;
  }
  if (isa<arith::OrIOp, arith::XOrIOp, arith::MaxUIOp>(op)) {
    std::optional<uint64_t> a = bound(0), b = bound(1);
    if (!a || !b) return std::nullopt;
    if (!isa<arith::MaxUIOp>(op)) {
      // Below the next power of two of the larger bound.
      uint64_t m = std::max(*a, *b);
      return m == 0 ? 0 : fits(llvm::maskTrailingOnes<uint64_t>(llvm::Log2_64(m) + 1));
    }
    return std::max(*a, *b);
  }
  if (auto select = dyn_cast<arith::SelectOp>(op)) {
    std::optional<uint64_t> a = bound(1), b = bound(2);
    if (a && b) return std::max(*a, *b);
    return std::nullopt;
  }
  return std::nullopt;
}

// A power-of-two remainder of a value that varies with the thread counter
// of `loop` (`x % 2^k` as arith.remui, `x & (2^k - 1)` as arith.andi) that
// can wrap inside the loop: XLA's rotated shared-memory tiles
// (`(column + row) % 32`). LLVM 22's loop vectorizer miscompiles the
// addresses built from such a remainder: SCEV models it as
// `zext(trunc(x to ik))`, and when that is added to a value that varies in
// an enclosing loop (the tile's row) the run-time check that the k-bit
// recurrence does not wrap is lost, and the vectorizer stores and loads
// the wrapped addresses as consecutive ones (a 25-line loop without any of
// our annotations shows it; flags and the loop's independence are not the
// cause). Each such remainder is rewritten where its operand is below
// 2^(k+1), as `x < 2^k ? x : x - 2^k`, which SCEV cannot fold into a
// recurrence (the accesses become per-lane ones, still vectorized);
// returns false when one's operand is not bounded so (the caller then
// keeps the loop scalar).
bool guardWrappingRemainders(scf::ForOp loop) {
  Value counter = loop.getInductionVar();
  llvm::DenseSet<Value> varying{counter};
  SmallVector<Operation *> remainders;
  loop.getBody()->walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (!llvm::any_of(op->getOperands(), [&](Value v) { return varying.contains(v); }))
      return;
    for (Value result : op->getResults()) varying.insert(result);
    if (op->getNumResults() != 1 || !op->getResult(0).getType().isIntOrIndex()) return;
    APInt divisor;
    if (isa<arith::RemUIOp>(op) &&
        matchPattern(op->getOperand(1), m_ConstantInt(&divisor)) && divisor.isPowerOf2())
      remainders.push_back(op);
    else if (isa<arith::AndIOp>(op) &&
             matchPattern(op->getOperand(1), m_ConstantInt(&divisor)) &&
             divisor.isMask() && varying.contains(op->getOperand(0)))
      remainders.push_back(op);
  });
  bool allGuarded = true;
  for (Operation *op : remainders) {
    APInt constant;
    (void)matchPattern(op->getOperand(1), m_ConstantInt(&constant));
    uint64_t modulus = isa<arith::RemUIOp>(op) ? constant.getZExtValue()
                                               : constant.getZExtValue() + 1;
    Value x = op->getOperand(0);
    std::optional<uint64_t> upper = unsignedUpperBound(x);
    if (upper && *upper < modulus) continue;  // never wraps
    if (!upper || modulus == 0 || *upper / 2 >= modulus) {
      allGuarded = false;
      continue;
    }
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value m = arith::ConstantOp::create(b, loc, b.getIntegerAttr(x.getType(), modulus));
    Value below = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, x, m);
    Value wrapped = arith::SubIOp::create(b, loc, x, m);
    Value result = arith::SelectOp::create(b, loc, below, x, wrapped);
    op->getResult(0).replaceAllUsesWith(result);
    op->erase();
  }
  return allGuarded;
}

// Marks `loop` (over a block's threads) as one whose iterations do not
// depend on each other through memory: threads between two barriers do not
// communicate (a race on the GPU otherwise), and a thread's own accesses
// keep their order inside its iteration. Every load and store in it joins
// a fresh access group, and the loop carries `llvm.loop_annotation` with
// `parallelAccesses` (xla-lower-to-host moves it onto the loop's latch).
// LLVM's vectorizer then needs no dependence analysis and no run-time
// overlap checks: arguments that share bytes (an elementwise output over
// its input) stay correct, and addresses it cannot bound do not stop it.
// Loops with atomics (threads do communicate) are left alone.
void markThreadsIndependent(scf::ForOp loop) {
  MLIRContext *ctx = loop.getContext();
  // A remainder that may wrap and cannot be guarded keeps the loop scalar
  // (see guardWrappingRemainders), whether its threads are independent or
  // not; so do many branches (kMaxBranchesToVectorize).
  LLVM::LoopVectorizeAttr vectorize;
  int branches = 0;
  loop.getBody()->walk([&](scf::IfOp) { ++branches; });
  if (!guardWrappingRemainders(loop) || branches > kMaxBranchesToVectorize)
    vectorize = LLVM::LoopVectorizeAttr::get(ctx, BoolAttr::get(ctx, true), {}, {},
                                             {}, {}, {}, {});
  bool atomics = loop.getBody()
                     ->walk([](Operation *op) {
                       return isa<LLVM::AtomicRMWOp, LLVM::AtomicCmpXchgOp>(op)
                                  ? WalkResult::interrupt()
                                  : WalkResult::advance();
                     })
                     .wasInterrupted();
  if (atomics) {
    if (vectorize)
      loop->setAttr("llvm.loop_annotation",
                    LLVM::LoopAnnotationAttr::get(ctx, {}, vectorize, {}, {}, {}, {}, {},
                                                  {}, {}, {}, {}, {}, {}, {}, {}));
    return;
  }
  auto group = LLVM::AccessGroupAttr::get(ctx, DistinctAttr::create(UnitAttr::get(ctx)));
  loop.getBody()->walk([&](Operation *op) {
    auto access = dyn_cast<LLVM::AccessGroupOpInterface>(op);
    if (!access || !isa<LLVM::LoadOp, LLVM::StoreOp>(op)) return;
    SmallVector<Attribute> groups;
    if (ArrayAttr existing = access.getAccessGroupsOrNull())
      llvm::append_range(groups, existing);
    groups.push_back(group);
    access.setAccessGroups(ArrayAttr::get(ctx, groups));
  });
  auto annotation = LLVM::LoopAnnotationAttr::get(
      ctx, {}, vectorize, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {group});
  loop->setAttr("llvm.loop_annotation", annotation);
}

bool hasAtomics(Operation *root) {
  return root
      ->walk([](Operation *op) {
        return isa<LLVM::AtomicRMWOp, LLVM::AtomicCmpXchgOp>(op)
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      })
      .wasInterrupted();
}

// `old op value` as plain LLVM arithmetic, or null for an operation this
// does not know (the atomic then stays).
Value combineLikeAtomic(OpBuilder &b, Location loc, LLVM::AtomicBinOp op,
                        Value old, Value value) {
  using Bin = LLVM::AtomicBinOp;
  switch (op) {
  case Bin::xchg: return value;
  case Bin::add: return LLVM::AddOp::create(b, loc, old, value);
  case Bin::sub: return LLVM::SubOp::create(b, loc, old, value);
  case Bin::_and: return LLVM::AndOp::create(b, loc, old, value);
  case Bin::_or: return LLVM::OrOp::create(b, loc, old, value);
  case Bin::_xor: return LLVM::XOrOp::create(b, loc, old, value);
  case Bin::max: return LLVM::SMaxOp::create(b, loc, old, value);
  case Bin::min: return LLVM::SMinOp::create(b, loc, old, value);
  case Bin::umax: return LLVM::UMaxOp::create(b, loc, old, value);
  case Bin::umin: return LLVM::UMinOp::create(b, loc, old, value);
  case Bin::fadd: return LLVM::FAddOp::create(b, loc, old, value);
  case Bin::fsub: return LLVM::FSubOp::create(b, loc, old, value);
  case Bin::fmax: return LLVM::MaxNumOp::create(b, loc, old, value);
  case Bin::fmin: return LLVM::MinNumOp::create(b, loc, old, value);
  case Bin::fmaximum: return LLVM::MaximumOp::create(b, loc, old, value);
  case Bin::fminimum: return LLVM::MinimumOp::create(b, loc, old, value);
  default: return {};
  }
}

// In `func`, which runs on one thread, atomics become loads and stores:
// atomicrmw -> load, combine, store (the old value is the result);
// cmpxchg -> load, store the new value where the old one matched (the old
// one back otherwise), {old, matched}.
LogicalResult serializeAtomics(func::FuncOp func) {
  SmallVector<Operation *> atomics;
  func.walk([&](Operation *op) {
    if (isa<LLVM::AtomicRMWOp, LLVM::AtomicCmpXchgOp>(op)) atomics.push_back(op);
  });
  for (Operation *atomic : atomics) {
    OpBuilder b(atomic);
    Location loc = atomic->getLoc();
    if (auto rmw = dyn_cast<LLVM::AtomicRMWOp>(atomic)) {
      Type type = rmw.getVal().getType();
      Value old = LLVM::LoadOp::create(b, loc, type, rmw.getPtr());
      Value updated = combineLikeAtomic(b, loc, rmw.getBinOp(), old, rmw.getVal());
      if (!updated) {
        old.getDefiningOp()->erase();
        continue;
      }
      LLVM::StoreOp::create(b, loc, updated, rmw.getPtr());
      rmw.getResult().replaceAllUsesWith(old);
      rmw.erase();
      continue;
    }
    auto cas = cast<LLVM::AtomicCmpXchgOp>(atomic);
    Type type = cas.getVal().getType();
    Value old = LLVM::LoadOp::create(b, loc, type, cas.getPtr());
    Value matched = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::eq, old,
                                         cas.getCmp());
    Value stored = LLVM::SelectOp::create(b, loc, matched, cas.getVal(), old);
    LLVM::StoreOp::create(b, loc, stored, cas.getPtr());
    Value pair = LLVM::UndefOp::create(b, loc, cas.getType());
    pair = LLVM::InsertValueOp::create(b, loc, pair, old, ArrayRef<int64_t>{0});
    pair = LLVM::InsertValueOp::create(b, loc, pair, matched, ArrayRef<int64_t>{1});
    cas.getResult().replaceAllUsesWith(pair);
    cas.erase();
  }
  return success();
}

// One kernel's rewrite into @k_host_blocks.
class KernelEmulation {
public:
  KernelEmulation(func::FuncOp kernel, int64_t threads, int64_t blocks,
                  SymbolTableCollection &symbols)
      : kernel_(kernel), body_(kernel.getBody().front()), threads_(threads),
        blocks_(blocks), symbols_(symbols), entry_(kernel.getContext()) {}

  LogicalResult run();

private:
  // A kernel's scf.for (`source`) run as a block-level loop over the same
  // counter (`outer`) around the thread loops of phases of its body; one
  // buffer of one slot per thread per loop-carried value.
  struct CarriedLoop {
    scf::ForOp source, outer;
    UniformLoop bounds{};
    SmallVector<Value> carried;
    SmallVector<Type> carriedTypes;
  };
  struct Phase {
    SmallVector<Operation *> ops;
    // The innermost loop over the threads of the block: over all of them,
    // or over the lanes of a warp inside a loop over the warps.
    scf::ForOp loop;
    Value thread;      // the thread id (index)
    Value warp, lane;  // index, once the loop is warps x lanes (splitIntoWarps)
    // A lifted uniform loop (its `source` is null otherwise).
    CarriedLoop lifted;
    // What a value of an earlier phase, or a grid query, is in this phase.
    llvm::DenseMap<Value, Value> values;
    Value threadI64;
    // The loop with barriers this phase is part of (an index into
    // barrierLoops_), if any; `forced`: it gets a thread loop even without
    // ops (the one that writes that loop's carried values).
    std::optional<unsigned> inLoop;
    bool forced = false;
  };
  // A top-level scf.for with barriers in its body: phases [first, last]
  // run inside its block-level loop. Its carried values are written at the
  // end of phase `writes` (the last of them with ops) with `next`, the
  // yielded values as that phase sees them.
  struct BarrierLoop : CarriedLoop {
    unsigned first = 0, last = 0, writes = 0;
    SmallVector<Value> next;
  };
  struct Kept {
    Value buffer;  // one slot per thread
    Type stored;   // index is kept as i64
    unsigned phase;
  };
  // One shuffle_reduce: per operand, two buffers of one slot per thread
  // (the butterfly's current and next values).
  struct Shuffle {
    ShuffleReduceOp op;
    SmallVector<Type> stored;
    SmallVector<Value> buffers[2];
    unsigned resultSide = 0;             // which buffers hold the results
    SmallVector<Value> operandsInPhase;  // stored at the phase's end
    // Nonzero when the combiner is symmetric: the results of a group of
    // `groupSize` lanes are all in the group's first slot.
    int64_t groupSize = 0;
  };

  LogicalResult check();
  LogicalResult replaceSharedMemory();
  void cutIntoPhases();
  void cutIntoPhases(Block &block);
  void newPhase(SyncKind kind, Operation *sync);
  void buildLoops();
  LogicalResult rewriteOperands();
  void moveOpsAndKeepValues();
  void emitBetweenPhases(OpBuilder &b, unsigned before);
  void emitButterfly(OpBuilder &b, Shuffle &shuffle);
  void emitGroupReduction(OpBuilder &b, ArrayRef<Shuffle *> shuffles);
  const Shuffle &shuffleOf(Operation *op) const;
  void foldWarpArithmetic();
  void splitIntoWarps(Phase &phase);
  void dissolveLiftedLoop(unsigned index);

  std::optional<unsigned> definingPhase(Value value) const;
  BarrierLoop *barrierLoopOf(Block *body);
  void openCarriedLoop(OpBuilder &b, CarriedLoop &loop);
  Value firstIteration(OpBuilder &b, CarriedLoop &loop);
  FailureOr<Value> carriedValue(BarrierLoop &loop, unsigned k, unsigned phase);
  Value loadSlot(OpBuilder &b, Location loc, Value buffer, Type stored, Type type,
                 unsigned phase);
  void storeSlot(OpBuilder &b, Location loc, Value value, Value buffer, Type stored,
                 unsigned phase);
  bool recomputable(Value value, int depth);
  FailureOr<Value> valueIn(Value value, unsigned phase);
  Value gridValue(Operation *query, unsigned phase);
  FailureOr<Value> reload(Value value, unsigned phase);
  Value threadSlot(OpBuilder &b, Location loc, Value buffer, Type stored,
                   unsigned phase);
  Value threadBuffer(Location loc, Type stored);
  Value indexConstant(int64_t value);
  Value i64One() {
    if (!i64One_)
      i64One_ = LLVM::ConstantOp::create(entry_, kernel_.getLoc(),
                                         entry_.getI64Type(), 1);
    return i64One_;
  }
  OpBuilder atPhaseEnd(unsigned phase) {
    return OpBuilder(phases_[phase].loop.getBody()->getTerminator());
  }

  func::FuncOp kernel_;
  Block &body_;
  int64_t threads_, blocks_;
  SymbolTableCollection &symbols_;
  OpBuilder entry_;  // the start of the kernel: buffers and constants
  llvm::DenseSet<Operation *> prologue_;
  SmallVector<Phase, 4> phases_;
  SmallVector<SyncKind> syncs_;  // syncs_[i] ends phases_[i]
  SmallVector<Operation *> syncOps_;
  // By the phase they end: one shuffle_reduce, or several independent ones
  // that follow each other with nothing between (a multi-output
  // reduction's rows), which run between the same two phases.
  llvm::MapVector<unsigned, SmallVector<Shuffle, 1>> shuffles_;
  // Top-level ops (of the kernel, or of a loop with barriers) -> phase.
  llvm::DenseMap<Operation *, unsigned> phaseOf_;
  SmallVector<BarrierLoop> barrierLoops_;
  llvm::DenseMap<Block *, unsigned> barrierLoopOfBody_;
  llvm::MapVector<Value, Kept> kept_;
  llvm::DenseMap<Value, bool> recomputable_;
  llvm::DenseMap<int64_t, Value> constants_;
  // The innermost loops of the shuffle emulation (over threads or lanes).
  SmallVector<scf::ForOp> exchangeLoops_;
  Value blockIv_, i64One_;
};

LogicalResult KernelEmulation::check() {
  if (kernel_.getNumResults() != 0)
    return kernelError(kernel_)
           << "a kernel returns nothing (run xla-lower-tensors first)";
  if (!kernel_.getBody().hasOneBlock())
    return kernelError(kernel_) << "the kernel body must be one block (run "
                                   "xla-emulate-grid before convert-scf-to-cf)";
  WalkResult walk = kernel_.walk([&](Operation *op) -> WalkResult {
    if (std::optional<SyncKind> kind = getSyncKind(op)) {
      bool barrier = *kind == SyncKind::kBlockBarrier;
      Operation *parent = op->getParentOp();
      bool inBarrierLoop = barrier && parent->getBlock() == &body_ &&
                           barrierLoop(parent).has_value();
      if (op->getBlock() != &body_ && !inBarrierLoop) {
        InFlightDiagnostic error = op->emitOpError("inside '");
        error << parent->getName()
              << "' cannot be emulated on the host: the kernel is cut into "
                 "phases at ";
        if (barrier)
          error << "barriers, which must be at the top level of the kernel "
                   "or of a loop there with constant bounds";
        else
          error << "warp shuffles, which must be at the top level of the "
                   "kernel";
        return error;
      }
      // A butterfly up to distance m exchanges values within groups of 2m
      // lanes: the block must be whole groups (a lane a partial group lacks
      // has no value to shuffle on the GPU either).
      int64_t group = barrier ? 1 : 2 * cast<ShuffleReduceOp>(op).getMaxDistance();
      if (threads_ % group != 0) {
        InFlightDiagnostic error = op->emitOpError();
        if (group == kWarpSize)
          error << "needs whole warps";
        else
          error << "needs whole groups of " << group << " lanes (max_distance "
                << group / 2 << ")";
        error << ", but the block has " << threads_
              << " threads, not a multiple of " << group
              << " (the lanes a partial group lacks have no values to "
                 "shuffle on the GPU either)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    }
    if (isGridQuery(op)) return WalkResult::advance();
    if (isa_and_nonnull<gpu::GPUDialect, NVVM::NVVMDialect>(op->getDialect()))
      return op->emitOpError("has no host emulation");
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

// Shared memory is a per-block buffer: an alloca at the kernel's start,
// which every block reuses (blocks run one after the other).
LogicalResult KernelEmulation::replaceSharedMemory() {
  auto module = kernel_->getParentOfType<ModuleOp>();
  SmallVector<std::pair<LLVM::AddressOfOp, LLVM::GlobalOp>> uses;
  kernel_.walk([&](LLVM::AddressOfOp addr) {
    auto global = symbols_.lookupSymbolIn<LLVM::GlobalOp>(
        module, addr.getGlobalNameAttr());
    if (global && global.getAddrSpace() == kSharedMemorySpace)
      uses.emplace_back(addr, global);
  });
  auto ptr = LLVM::LLVMPointerType::get(kernel_.getContext());
  for (auto [addr, global] : uses)
    for (Operation *user : addr->getUsers()) {
      auto cast = dyn_cast<LLVM::AddrSpaceCastOp>(user);
      if (!cast || cast.getType() != ptr)
        return user->emitOpError("uses shared memory @")
               << global.getSymName()
               << " in address space 3; the host emulation needs it cast to "
                  "the generic address space first";
    }
  llvm::DenseMap<Operation *, Value> buffers;
  Value one;
  for (auto [addr, global] : uses) {
    Value &buffer = buffers[global];
    if (!buffer) {
      Location loc = global.getLoc();
      if (!one) {
        one = i64One();
        prologue_.insert(one.getDefiningOp());
      }
      unsigned alignment =
          std::max<unsigned>(global.getAlignment().value_or(0), 16);
      buffer = LLVM::AllocaOp::create(entry_, loc, ptr, global.getType(), one,
                                      alignment);
      prologue_.insert(buffer.getDefiningOp());
    }
    for (Operation *user : llvm::make_early_inc_range(addr->getUsers())) {
      user->getResult(0).replaceAllUsesWith(buffer);
      user->erase();
    }
    addr.erase();
  }
  return success();
}

void KernelEmulation::newPhase(SyncKind kind, Operation *sync) {
  syncs_.push_back(kind);
  syncOps_.push_back(sync);
  phases_.emplace_back();
}

void KernelEmulation::cutIntoPhases() {
  phases_.emplace_back();
  cutIntoPhases(body_);
}

// The ops of `block` (the kernel's body, or a loop's with barriers) into
// phases, from the last one on.
void KernelEmulation::cutIntoPhases(Block &block) {
  // The synthetic cuts around a lifted loop or a loop with barriers.
  auto cutHere = [&] { newPhase(SyncKind::kLiftedLoop, nullptr); };
  for (Operation &op : block.without_terminator()) {
    if (prologue_.contains(&op)) continue;
    if (std::optional<SyncKind> kind = getSyncKind(&op)) {
      if (*kind == SyncKind::kWarpCollective) {
        Shuffle shuffle;
        shuffle.op = cast<ShuffleReduceOp>(op);
        for (Type type : op.getOperandTypes())
          shuffle.stored.push_back(type.isIndex()
                                       ? IntegerType::get(op.getContext(), 64)
                                       : type);
        // Right after another shuffle, and not of its results: both run
        // between the same phases (the phase between them would do
        // nothing but copy this one's operands into its buffers).
        unsigned previous = phases_.size() - 2;
        if (phases_.size() >= 2 && phases_.back().ops.empty() &&
            syncs_.back() == SyncKind::kWarpCollective &&
            !shuffles_.count(phases_.size() - 1) && shuffles_.count(previous) &&
            llvm::none_of(op.getOperands(), [&](Value operand) {
              return llvm::any_of(shuffles_[previous], [&](const Shuffle &s) {
                return operand.getDefiningOp<ShuffleReduceOp>() == s.op;
              });
            })) {
          shuffles_[previous].push_back(std::move(shuffle));
          continue;
        }
        shuffles_[phases_.size() - 1].push_back(std::move(shuffle));
      }
      newPhase(*kind, &op);
      continue;
    }
    bool startsPhase = !phases_.back().ops.empty() || shuffles_.count(phases_.size() - 1);
    if (std::optional<UniformLoop> bounds;
        &block == &body_ && (bounds = barrierLoop(&op))) {
      if (startsPhase) cutHere();
      unsigned index = barrierLoops_.size();
      barrierLoops_.push_back({});
      barrierLoops_[index].source = cast<scf::ForOp>(op);
      barrierLoops_[index].bounds = *bounds;
      barrierLoops_[index].first = phases_.size() - 1;
      barrierLoopOfBody_[barrierLoops_[index].source.getBody()] = index;
      phaseOf_[&op] = phases_.size() - 1;
      cutIntoPhases(*barrierLoops_[index].source.getBody());
      BarrierLoop &loop = barrierLoops_[index];
      loop.last = phases_.size() - 1;
      // The carried values are written where the iteration's last ops
      // run; no phase after it in the loop reads them.
      loop.writes = loop.last;
      while (loop.writes > loop.first && phases_[loop.writes].ops.empty())
        --loop.writes;
      if (phases_[loop.writes].lifted.source) loop.writes = loop.last;
      if (phases_[loop.writes].ops.empty() && loop.source.getNumResults())
        phases_[loop.writes].forced = true;
      for (unsigned i = loop.first; i <= loop.last; ++i) phases_[i].inLoop = index;
      cutHere();
      continue;
    }
    if (std::optional<UniformLoop> bounds = liftableLoop(&op)) {
      if (startsPhase) cutHere();
      phaseOf_[&op] = phases_.size() - 1;
      phases_.back().ops.push_back(&op);
      phases_.back().lifted.source = cast<scf::ForOp>(op);
      phases_.back().lifted.bounds = *bounds;
      cutHere();
      continue;
    }
    phaseOf_[&op] = phases_.size() - 1;
    phases_.back().ops.push_back(&op);
  }
}

Value KernelEmulation::indexConstant(int64_t value) {
  Value &c = constants_[value];
  if (!c) c = arith::ConstantIndexOp::create(entry_, kernel_.getLoc(), value);
  return c;
}

void KernelEmulation::buildLoops() {
  Location loc = kernel_.getLoc();
  unsigned n = body_.getNumArguments();
  Value first = body_.getArgument(n - 2), end = body_.getArgument(n - 1);
  Value zero = indexConstant(0), one = indexConstant(1);
  Value threads = indexConstant(threads_);
  OpBuilder b(body_.getTerminator());
  auto blockLoop = scf::ForOp::create(b, loc, first, end, one);
  // LLVM vectorizes the thread loops. Where it fully unrolls a block's
  // threads first (a few lanes of cheap index arithmetic), the block loop
  // is innermost and would be vectorized instead: every access a gather
  // across blocks behind run-time overlap checks (a dynamic slice's
  // kernel 4 times slower than its thread loop vectorized). The unrolled
  // threads are straight-line code the SLP vectorizer takes.
  MLIRContext *ctx = b.getContext();
  blockLoop->setAttr(
      "llvm.loop_annotation",
      LLVM::LoopAnnotationAttr::get(
          ctx, {}, LLVM::LoopVectorizeAttr::get(ctx, BoolAttr::get(ctx, true), {}, {}, {}, {},
                                                {}, {}),
          {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}));
  blockIv_ = blockLoop.getInductionVar();
  b.setInsertionPoint(blockLoop.getBody()->getTerminator());
  for (auto [i, phase] : llvm::enumerate(phases_)) {
    if (i > 0) emitBetweenPhases(b, i - 1);
    BarrierLoop *around = phase.inLoop ? &barrierLoops_[*phase.inLoop] : nullptr;
    if (around && around->first == i) {
      openCarriedLoop(b, *around);
      b.setInsertionPoint(around->outer.getBody()->getTerminator());
    }
    // A phase that ends in a shuffle stores its operands, even when it
    // has no ops of its own.
    if (!phase.ops.empty() || shuffles_.count(i) || phase.forced) {
      OpBuilder inner = b;
      if (phase.lifted.source) {
        openCarriedLoop(b, phase.lifted);
        inner.setInsertionPoint(phase.lifted.outer.getBody()->getTerminator());
      }
      phase.loop = scf::ForOp::create(inner, loc, zero, threads, one);
      phase.thread = phase.loop.getInductionVar();
    }
    if (around && around->last == i) b.setInsertionPointAfter(around->outer);
  }
}

void KernelEmulation::emitBetweenPhases(OpBuilder &b, unsigned before) {
  switch (syncs_[before]) {
  case SyncKind::kBlockBarrier:
  case SyncKind::kLiftedLoop:
    return;  // the loop structure is the barrier
  case SyncKind::kWarpCollective: {
    // Symmetric combiners of the same distance share one loop nest over
    // the groups and distances, each shuffle with its own buffers and
    // calls in its own order; the others run one butterfly each.
    SmallVector<SmallVector<Shuffle *>> groups;
    for (Shuffle &shuffle : shuffles_[before]) {
      auto combiner = symbols_.lookupNearestSymbolFrom<func::FuncOp>(
          shuffle.op, shuffle.op.getCombinerAttr());
      if (!isSymmetricCombiner(combiner)) {
        emitButterfly(b, shuffle);
        continue;
      }
      auto sameDistance = llvm::find_if(groups, [&](ArrayRef<Shuffle *> group) {
        return group.front()->op.getMaxDistance() == shuffle.op.getMaxDistance();
      });
      if (sameDistance == groups.end())
        groups.push_back({&shuffle});
      else
        sameDistance->push_back(&shuffle);
    }
    for (ArrayRef<Shuffle *> group : groups) emitGroupReduction(b, group);
    return;
  }
  }
}

// A symmetric combiner's butterfly leaves the same value in every lane of a
// group of 2 * max_distance lanes: after the step at distance d, lanes t
// and t xor d hold combiner(x_t, x_(t^d)) and combiner(x_(t^d), x_t), which
// are equal, and the next steps combine equal pairs. That value is the
// group's first lane's, so only the lanes a first lane depends on are
// computed: at distance d, lanes j < d of the group take combiner(own,
// lane j + d) in place (2m - 1 calls for a group of 2m lanes, not 2m log2
// 2m), in the GPU's order, so the result is bit-identical.
void KernelEmulation::emitGroupReduction(OpBuilder &b, ArrayRef<Shuffle *> shuffles) {
  // All of the same max_distance (and so of the same groups and steps).
  Location loc = shuffles.front()->op.getLoc();
  int64_t maxDistance = shuffles.front()->op.getMaxDistance();
  for (Shuffle *shuffle : shuffles) {
    for (Type stored : shuffle->stored)
      shuffle->buffers[0].push_back(threadBuffer(shuffle->op.getLoc(), stored));
    shuffle->resultSide = 0;
    shuffle->groupSize = 2 * maxDistance;
  }
  Value zero = indexConstant(0), one = indexConstant(1);
  auto groups = scf::ForOp::create(b, loc, zero, indexConstant(threads_),
                                   indexConstant(2 * maxDistance));
  OpBuilder inGroup(groups.getBody()->getTerminator());
  Type i64 = b.getI64Type();
  Value first = arith::IndexCastUIOp::create(inGroup, loc, i64,
                                             groups.getInductionVar());
  for (int64_t d = maxDistance; d >= 1; d /= 2) {
    auto lanes = scf::ForOp::create(inGroup, loc, zero, indexConstant(d), one);
    exchangeLoops_.push_back(lanes);
    OpBuilder body(lanes.getBody()->getTerminator());
    auto flags = arith::IntegerOverflowFlags::nsw | arith::IntegerOverflowFlags::nuw;
    Value mine = arith::AddIOp::create(
        body, loc, first,
        arith::IndexCastUIOp::create(body, loc, i64, lanes.getInductionVar()),
        flags);
    Value other = arith::AddIOp::create(
        body, loc, mine, arith::ConstantIntOp::create(body, loc, i64, d), flags);
    for (Shuffle *shuffle : shuffles) {
      ShuffleReduceOp op = shuffle->op;
      Location opLoc = op.getLoc();
      auto address = [&](unsigned k, Value slot) -> Value {
        Value buffer = shuffle->buffers[0][k];
        return LLVM::GEPOp::create(body, opLoc, buffer.getType(), shuffle->stored[k],
                                   buffer, ValueRange{slot},
                                   LLVM::GEPNoWrapFlags::inbounds);
      };
      auto load = [&](unsigned k, Value slot) -> Value {
        Value v = LLVM::LoadOp::create(body, opLoc, shuffle->stored[k], address(k, slot));
        Type type = op.getOperand(k).getType();
        if (type.isIndex()) v = arith::IndexCastOp::create(body, opLoc, type, v);
        return v;
      };
      SmallVector<Value> args;
      for (unsigned k = 0; k < op.getNumOperands(); ++k) args.push_back(load(k, mine));
      for (unsigned k = 0; k < op.getNumOperands(); ++k) args.push_back(load(k, other));
      auto call = func::CallOp::create(body, opLoc, op.getCombinerAttr(),
                                       op.getResultTypes(), args);
      for (auto [k, result] : llvm::enumerate(call.getResults())) {
        Value v = result;
        if (v.getType().isIndex())
          v = arith::IndexCastOp::create(body, opLoc, shuffle->stored[k], v);
        LLVM::StoreOp::create(body, opLoc, v, address(k, mine));
      }
    }
  }
}

// The butterfly of one shuffle_reduce over all lanes of the block, one
// loop over the threads per distance.
void KernelEmulation::emitButterfly(OpBuilder &b, Shuffle &shuffle) {
  ShuffleReduceOp op = shuffle.op;
  Location loc = op.getLoc();
  for (Type stored : shuffle.stored)
    for (SmallVector<Value> &side : shuffle.buffers)
      side.push_back(threadBuffer(loc, stored));
  Value zero = indexConstant(0), one = indexConstant(1);
  Value threads = indexConstant(threads_);
  unsigned side = 0;
  for (int64_t d = op.getMaxDistance(); d >= 1; d /= 2, side ^= 1) {
    auto loop = scf::ForOp::create(b, loc, zero, threads, one);
    exchangeLoops_.push_back(loop);
    OpBuilder body(loop.getBody()->getTerminator());
    Type i64 = body.getI64Type();
    Value lane = arith::IndexCastUIOp::create(body, loc, i64,
                                              loop.getInductionVar());
    Value other = arith::XOrIOp::create(
        body, loc, lane, arith::ConstantIntOp::create(body, loc, i64, d));
    auto load = [&](unsigned k, Value slot) -> Value {
      Value buffer = shuffle.buffers[side][k];
      Type stored = shuffle.stored[k];
      Value addr = LLVM::GEPOp::create(body, loc, buffer.getType(), stored,
                                       buffer, ValueRange{slot},
                                       LLVM::GEPNoWrapFlags::inbounds);
      Value v = LLVM::LoadOp::create(body, loc, stored, addr);
      Type type = op.getOperand(k).getType();
      if (type.isIndex()) v = arith::IndexCastOp::create(body, loc, type, v);
      return v;
    };
    SmallVector<Value> args;
    for (unsigned k = 0; k < op.getNumOperands(); ++k)
      args.push_back(load(k, lane));
    for (unsigned k = 0; k < op.getNumOperands(); ++k)
      args.push_back(load(k, other));
    auto call = func::CallOp::create(body, loc, op.getCombinerAttr(),
                                     op.getResultTypes(), args);
    for (auto [k, result] : llvm::enumerate(call.getResults())) {
      Value buffer = shuffle.buffers[side ^ 1][k];
      Type stored = shuffle.stored[k];
      Value v = result;
      if (v.getType().isIndex())
        v = arith::IndexCastOp::create(body, loc, stored, v);
      Value addr = LLVM::GEPOp::create(body, loc, buffer.getType(), stored,
                                       buffer, ValueRange{lane},
                                       LLVM::GEPNoWrapFlags::inbounds);
      LLVM::StoreOp::create(body, loc, v, addr);
    }
  }
  shuffle.resultSide = side;
}

std::optional<unsigned> KernelEmulation::definingPhase(Value value) const {
  Operation *def = value.getDefiningOp();
  if (!def) return std::nullopt;  // a kernel argument, or local to its op
  // The op holding `def` that is one of a phase's: in the kernel's body,
  // or in a loop's with barriers.
  Operation *top = def;
  while (top && top->getBlock() != &body_ &&
         !barrierLoopOfBody_.count(top->getBlock()))
    top = top->getParentOp();
  auto it = top ? phaseOf_.find(top) : phaseOf_.end();
  if (it == phaseOf_.end()) return std::nullopt;
  return it->second;
}

bool KernelEmulation::recomputable(Value value, int depth) {
  if (auto it = recomputable_.find(value); it != recomputable_.end())
    return it->second;
  Operation *def = value.getDefiningOp();
  bool result;
  if (!def)  // a kernel argument, or the counter of a loop with barriers
    result = value.getParentBlock() == &body_ ||
             (barrierLoopOf(value.getParentBlock()) &&
              cast<BlockArgument>(value).getArgNumber() == 0);
  else if (isGridQuery(def) || prologue_.contains(def))
    result = true;  // the prologue (shared memory, constants) is everywhere
  else if (getSyncKind(def)) result = false;  // a shuffle's results
  else if (depth > kMaxRecomputeDepth || def->getNumRegions() != 0 ||
           !isMemoryEffectFree(def))
    result = false;
  else
    result = llvm::all_of(def->getOperands(), [&](Value operand) {
      return recomputable(operand, depth + 1);
    });
  recomputable_[value] = result;
  return result;
}

Value KernelEmulation::gridValue(Operation *query, unsigned phase) {
  Value thread = phases_[phase].thread;
  auto isX = [](gpu::Dimension d) { return d == gpu::Dimension::x; };
  return llvm::TypeSwitch<Operation *, Value>(query)
      .Case([&](gpu::ThreadIdOp op) {
        return isX(op.getDimension()) ? thread : indexConstant(0);
      })
      .Case([&](gpu::BlockIdOp op) {
        return isX(op.getDimension()) ? blockIv_ : indexConstant(0);
      })
      .Case([&](gpu::BlockDimOp op) {
        return indexConstant(isX(op.getDimension()) ? threads_ : 1);
      })
      .Case([&](gpu::GridDimOp op) {
        return indexConstant(isX(op.getDimension()) ? blocks_ : 1);
      })
      .Case([&](gpu::LaneIdOp op) -> Value {
        OpBuilder b = atPhaseEnd(phase);
        return arith::RemUIOp::create(b, op.getLoc(), thread,
                                      indexConstant(kWarpSize));
      })
      .Default([](Operation *) { return Value(); });
}

Value KernelEmulation::threadSlot(OpBuilder &b, Location loc, Value buffer,
                                  Type stored, unsigned phase) {
  Phase &p = phases_[phase];
  if (!p.threadI64) {
    OpBuilder start(p.loop.getBody(), p.loop.getBody()->begin());
    if (Operation *def = p.thread.getDefiningOp()) start.setInsertionPointAfter(def);
    p.threadI64 = arith::IndexCastUIOp::create(start, loc, start.getI64Type(),
                                               p.thread);
  }
  return LLVM::GEPOp::create(b, loc, buffer.getType(), stored, buffer,
                             ValueRange{p.threadI64},
                             LLVM::GEPNoWrapFlags::inbounds);
}

// A buffer of one `stored` slot per thread of the block, allocated once.
Value KernelEmulation::threadBuffer(Location loc, Type stored) {
  return LLVM::AllocaOp::create(
      entry_, loc, LLVM::LLVMPointerType::get(stored.getContext()),
      LLVM::LLVMArrayType::get(stored, threads_), i64One(), /*alignment=*/0);
}

KernelEmulation::BarrierLoop *KernelEmulation::barrierLoopOf(Block *body) {
  auto it = barrierLoopOfBody_.find(body);
  return it == barrierLoopOfBody_.end() ? nullptr : &barrierLoops_[it->second];
}

// The block-level loop of `loop` at `b`, and its buffers.
void KernelEmulation::openCarriedLoop(OpBuilder &b, CarriedLoop &loop) {
  for (Type type : loop.source.getResultTypes()) {
    Type stored = type.isIndex() ? b.getI64Type() : type;
    loop.carriedTypes.push_back(stored);
    loop.carried.push_back(threadBuffer(loop.source.getLoc(), stored));
  }
  loop.outer = scf::ForOp::create(b, kernel_.getLoc(), indexConstant(loop.bounds.lower),
                                  indexConstant(loop.bounds.upper),
                                  indexConstant(loop.bounds.step));
}

Value KernelEmulation::firstIteration(OpBuilder &b, CarriedLoop &loop) {
  return arith::CmpIOp::create(b, loop.source.getLoc(), arith::CmpIPredicate::eq,
                               loop.outer.getInductionVar(),
                               indexConstant(loop.bounds.lower));
}

// The thread's slot of `buffer` (of `stored` values) in `phase`, as a value
// of `type` (an index is kept as i64).
Value KernelEmulation::loadSlot(OpBuilder &b, Location loc, Value buffer, Type stored,
                                Type type, unsigned phase) {
  Value loaded = LLVM::LoadOp::create(b, loc, stored,
                                      threadSlot(b, loc, buffer, stored, phase));
  if (type.isIndex()) loaded = arith::IndexCastOp::create(b, loc, type, loaded);
  return loaded;
}

void KernelEmulation::storeSlot(OpBuilder &b, Location loc, Value value, Value buffer,
                                Type stored, unsigned phase) {
  if (value.getType().isIndex())
    value = arith::IndexCastOp::create(b, loc, stored, value);
  LLVM::StoreOp::create(b, loc, value, threadSlot(b, loc, buffer, stored, phase));
}

// Carried value `k` of `loop` as phase `phase` sees it: inside the loop,
// the thread's slot, or the initial value on the first iteration; after
// it, the slot (the last iteration's value).
FailureOr<Value> KernelEmulation::carriedValue(BarrierLoop &loop, unsigned k,
                                               unsigned phase) {
  Value init = loop.source.getInitArgs()[k];
  Value initial;  // none after the loop
  if (phase <= loop.last) {
    FailureOr<Value> mapped = valueIn(init, phase);
    if (failed(mapped)) return failure();
    initial = *mapped;
  }
  OpBuilder b = atPhaseEnd(phase);
  Value saved = loadSlot(b, loop.source.getLoc(), loop.carried[k], loop.carriedTypes[k],
                         init.getType(), phase);
  if (!initial) return saved;
  return arith::SelectOp::create(b, loop.source.getLoc(), firstIteration(b, loop), initial,
                                 saved)
      .getResult();
}

FailureOr<Value> KernelEmulation::reload(Value value, unsigned phase) {
  auto it = kept_.find(value);
  if (it == kept_.end()) {
    Type stored = value.getType().isIndex()
                      ? IntegerType::get(value.getContext(), 64)
                      : value.getType();
    if (!LLVM::isCompatibleType(stored))
      return value.getDefiningOp()->emitOpError(
                 "result is used after a barrier and must be kept per "
                 "thread, but its type ")
             << value.getType() << " cannot be stored";
    Value buffer = threadBuffer(value.getLoc(), stored);
    it = kept_.insert({value, Kept{buffer, stored, *definingPhase(value)}}).first;
  }
  const Kept &kept = it->second;
  OpBuilder b = atPhaseEnd(phase);
  return loadSlot(b, value.getLoc(), kept.buffer, kept.stored, value.getType(), phase);
}

// `value` as phase `phase` sees it. While operands are rewritten, the
// phase's loop body holds only what this creates, so "before the
// terminator" is the phase's start.
FailureOr<Value> KernelEmulation::valueIn(Value value, unsigned phase) {
  Phase &p = phases_[phase];
  if (auto it = p.values.find(value); it != p.values.end()) return it->second;
  Value result = value;
  Operation *def = value.getDefiningOp();
  std::optional<unsigned> defined = definingPhase(value);
  auto arg = dyn_cast<BlockArgument>(value);
  BarrierLoop *inLoop = arg ? barrierLoopOf(arg.getOwner()) : nullptr;
  auto forOp = dyn_cast_or_null<scf::ForOp>(def);
  BarrierLoop *ofLoop = forOp ? barrierLoopOf(forOp.getBody()) : nullptr;
  if (inLoop && arg.getArgNumber() == 0) {
    result = inLoop->outer.getInductionVar();
  } else if (inLoop || ofLoop) {
    // A carried value in the loop, or a result after it.
    unsigned k = inLoop ? arg.getArgNumber() - 1 : cast<OpResult>(value).getResultNumber();
    FailureOr<Value> carried = carriedValue(inLoop ? *inLoop : *ofLoop, k, phase);
    if (failed(carried)) return failure();
    result = *carried;
  } else if (def && isGridQuery(def)) {
    result = gridValue(def, phase);
  } else if (isa_and_nonnull<ShuffleReduceOp>(def)) {
    // This thread's slot of the butterfly's last buffers.
    unsigned k = cast<OpResult>(value).getResultNumber();
    const Shuffle &s = shuffleOf(def);
    Value buffer = s.buffers[s.resultSide][k];
    Location loc = value.getLoc();
    OpBuilder b = atPhaseEnd(phase);
    Value slot = threadSlot(b, loc, buffer, s.stored[k], phase);
    if (s.groupSize) {
      // The group's first slot: thread & ~(groupSize - 1).
      Value first = arith::AndIOp::create(
          b, loc, phases_[phase].threadI64,
          arith::ConstantIntOp::create(b, loc, b.getI64Type(), ~(s.groupSize - 1)));
      slot = LLVM::GEPOp::create(b, loc, buffer.getType(), s.stored[k], buffer,
                                 ValueRange{first}, LLVM::GEPNoWrapFlags::inbounds);
    }
    result = LLVM::LoadOp::create(b, loc, s.stored[k], slot);
    if (value.getType().isIndex())
      result = arith::IndexCastOp::create(b, loc, value.getType(), result);
  } else if (defined && *defined < phase && phases_[*defined].lifted.source &&
             def == phases_[*defined].lifted.source.getOperation()) {
    // A lifted loop's result: its thread's slot of the carried buffer.
    const CarriedLoop &lifted = phases_[*defined].lifted;
    unsigned k = cast<OpResult>(value).getResultNumber();
    OpBuilder b = atPhaseEnd(phase);
    result = loadSlot(b, value.getLoc(), lifted.carried[k], lifted.carriedTypes[k],
                      value.getType(), phase);
  } else if (defined && *defined < phase) {
    if (recomputable(value, 0)) {
      IRMapping mapping;
      for (Value operand : def->getOperands()) {
        FailureOr<Value> mapped = valueIn(operand, phase);
        if (failed(mapped)) return failure();
        mapping.map(operand, *mapped);
      }
      OpBuilder b = atPhaseEnd(phase);
      Operation *clone = b.clone(*def, mapping);
      for (auto [from, to] : llvm::zip(def->getResults(), clone->getResults()))
        p.values[from] = to;
      return p.values[value];
    }
    FailureOr<Value> loaded = reload(value, phase);
    if (failed(loaded)) return failure();
    result = *loaded;
  }
  p.values[value] = result;
  return result;
}

// Every phase first finds what its operands are, from the ops as they
// were (recomputation clones them); then the operands change.
LogicalResult KernelEmulation::rewriteOperands() {
  SmallVector<std::pair<OpOperand *, Value>> updates;
  for (auto [i, phase] : llvm::enumerate(phases_)) {
    for (Operation *op : phase.ops) {
      WalkResult walk = op->walk([&](Operation *inner) -> WalkResult {
        for (OpOperand &operand : inner->getOpOperands()) {
          FailureOr<Value> value = valueIn(operand.get(), i);
          if (failed(value)) return WalkResult::interrupt();
          if (*value != operand.get()) updates.emplace_back(&operand, *value);
        }
        return WalkResult::advance();
      });
      if (walk.wasInterrupted()) return failure();
    }
    // The values a loop with barriers carries to its next iteration, as
    // the phase that writes them sees them.
    if (phase.inLoop && barrierLoops_[*phase.inLoop].writes == i) {
      BarrierLoop &loop = barrierLoops_[*phase.inLoop];
      for (Value yielded : loop.source.getBody()->getTerminator()->getOperands()) {
        FailureOr<Value> value = valueIn(yielded, i);
        if (failed(value)) return failure();
        loop.next.push_back(*value);
      }
    }
    // A shuffle's operands as this phase sees them, stored at its end.
    if (auto it = shuffles_.find(i); it != shuffles_.end())
      for (Shuffle &shuffle : it->second)
        for (Value operand : shuffle.op.getOperands()) {
          FailureOr<Value> value = valueIn(operand, i);
          if (failed(value)) return failure();
          shuffle.operandsInPhase.push_back(*value);
        }
  }
  for (auto [operand, value] : updates) operand->set(value);
  return success();
}

// A lifted loop's body runs in the thread loop inside the block-level loop
// over the same counter: the carried values come from the thread's slot
// (the initial values on the first iteration) and go back there.
void KernelEmulation::dissolveLiftedLoop(unsigned index) {
  Phase &phase = phases_[index];
  CarriedLoop &lifted = phase.lifted;
  scf::ForOp loop = lifted.source;
  Location loc = loop.getLoc();
  OpBuilder b = atPhaseEnd(index);
  Value first = firstIteration(b, lifted);
  SmallVector<Value> current;
  for (auto [k, init] : llvm::enumerate(loop.getInitArgs())) {
    Value saved = loadSlot(b, loc, lifted.carried[k], lifted.carriedTypes[k],
                           init.getType(), index);
    current.push_back(arith::SelectOp::create(b, loc, first, init, saved));
  }
  Block *body = loop.getBody();
  auto yield = cast<scf::YieldOp>(body->getTerminator());
  SmallVector<Value> next(yield.getOperands());
  loop.getInductionVar().replaceAllUsesWith(lifted.outer.getInductionVar());
  for (auto [arg, value] : llvm::zip(loop.getRegionIterArgs(), current))
    arg.replaceAllUsesWith(value);
  Operation *end = phase.loop.getBody()->getTerminator();
  end->getBlock()->getOperations().splice(end->getIterator(), body->getOperations(),
                                          body->begin(), yield->getIterator());
  b.setInsertionPoint(end);
  for (auto [k, value] : llvm::enumerate(next))
    storeSlot(b, loc, value, lifted.carried[k], lifted.carriedTypes[k], index);
  // Uses left are operands of the shuffle_reduce ops that end the phases
  // after (their operands were read into `operandsInPhase`, and the ops
  // are erased once emulated): they take the initial values instead, of
  // the same types, so that the loop can go.
  for (auto [result, init] : llvm::zip(loop.getResults(), loop.getInitArgs()))
    result.replaceAllUsesWith(init);
  loop.erase();
  lifted.source = nullptr;
}

void KernelEmulation::moveOpsAndKeepValues() {
  for (auto [i, phase] : llvm::enumerate(phases_)) {
    if (phase.lifted.source) {
      dissolveLiftedLoop(i);
      continue;
    }
    for (Operation *op : phase.ops)
      op->moveBefore(phase.loop.getBody()->getTerminator());
  }
  // The loops with barriers are empty now but for their barriers: each
  // iteration's carried values go to the thread's slots.
  for (BarrierLoop &loop : barrierLoops_) {
    OpBuilder b = atPhaseEnd(loop.writes);
    for (auto [k, value] : llvm::enumerate(loop.next))
      storeSlot(b, loop.source.getLoc(), value, loop.carried[k], loop.carriedTypes[k],
                loop.writes);
    for (auto [result, init] :
         llvm::zip(loop.source.getResults(), loop.source.getInitArgs()))
      result.replaceAllUsesWith(init);
    loop.source->dropAllReferences();
    loop.source.erase();
  }
  for (auto &[value, kept] : kept_) {
    OpBuilder b = atPhaseEnd(kept.phase);
    storeSlot(b, value.getLoc(), value, kept.buffer, kept.stored, kept.phase);
  }
  for (auto &[phase, ending] : shuffles_)
    for (Shuffle &shuffle : ending) {
      OpBuilder b = atPhaseEnd(phase);
      for (auto [k, value] : llvm::enumerate(shuffle.operandsInPhase))
        storeSlot(b, shuffle.op.getLoc(), value, shuffle.buffers[0][k], shuffle.stored[k],
                  phase);
    }
}

const KernelEmulation::Shuffle &KernelEmulation::shuffleOf(Operation *op) const {
  for (const auto &[phase, ending] : shuffles_)
    for (const Shuffle &shuffle : ending)
      if (ShuffleReduceOp(shuffle.op).getOperation() == op) return shuffle;
  llvm_unreachable("a shuffle_reduce of the kernel's top level");
}

// The phase's loop over the threads as a loop over the warps and, inside,
// over the 32 lanes: thread = 32 warp + lane.
void KernelEmulation::splitIntoWarps(Phase &phase) {
  scf::ForOp flat = phase.loop;
  Location loc = flat.getLoc();
  OpBuilder b(flat);
  Value zero = indexConstant(0), one = indexConstant(1);
  auto warps = scf::ForOp::create(b, loc, zero,
                                  indexConstant(threads_ / kWarpSize), one);
  b.setInsertionPoint(warps.getBody()->getTerminator());
  auto lanes = scf::ForOp::create(b, loc, zero, indexConstant(kWarpSize), one);
  b.setInsertionPointToStart(lanes.getBody());
  auto flags = arith::IntegerOverflowFlags::nsw | arith::IntegerOverflowFlags::nuw;
  Value thread = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc, warps.getInductionVar(),
                            indexConstant(kWarpSize), flags),
      lanes.getInductionVar(), flags);
  Block *body = lanes.getBody();
  body->getOperations().splice(body->getTerminator()->getIterator(),
                               flat.getBody()->getOperations(),
                               flat.getBody()->begin(),
                               flat.getBody()->getTerminator()->getIterator());
  flat.getInductionVar().replaceAllUsesWith(thread);
  flat.erase();
  phase.loop = lanes;
  phase.thread = thread;
  phase.warp = warps.getInductionVar();
  phase.lane = lanes.getInductionVar();
}

// In a phase run as warps x lanes, thread = 32 w + l with l < 32, so
// thread / c and thread % c for a c that divides 32 or that 32 divides are
// expressions of w and l without a division:
//   c | 32:  thread / c = w (32 / c) + l / c,   thread % c = l % c
//   32 | c:  thread / c = w / (c / 32),          thread % c = (w % (c / 32)) 32 + l
// The emitters' tiling (a warp's row, a lane's column) then indexes memory
// affinely in l, and the lane loop vectorizes without gathers.
void KernelEmulation::foldWarpArithmetic() {
  if (threads_ % kWarpSize != 0 || threads_ == kWarpSize) return;
  for (Phase &phase : phases_) {
    if (!phase.loop) continue;
    SmallVector<std::pair<Operation *, int64_t>> divisions;
    phase.loop.getBody()->walk([&](Operation *op) {
      if (!isa<arith::DivUIOp, arith::RemUIOp, arith::DivSIOp, arith::RemSIOp>(op) ||
          !isThreadId(op->getOperand(0), phase.thread))
        return;
      APInt divisorBits;
      if (!matchPattern(op->getOperand(1), m_ConstantInt(&divisorBits))) return;
      int64_t c = divisorBits.getSExtValue();
      if (c > 1 && (kWarpSize % c == 0 || c % kWarpSize == 0))
        divisions.emplace_back(op, c);
    });
    if (divisions.empty()) continue;
    splitIntoWarps(phase);
    for (auto [op, c] : divisions) {
      OpBuilder b(op);
      Location loc = op->getLoc();
      Type type = op->getResult(0).getType();
      auto cast = [&](Value v) -> Value {
        return type.isIndex() ? v : arith::IndexCastUIOp::create(b, loc, type, v).getResult();
      };
      auto constant = [&](int64_t v) -> Value {
        return type.isIndex() ? arith::ConstantIndexOp::create(b, loc, v).getResult()
                              : arith::ConstantIntOp::create(b, loc, type, v).getResult();
      };
      auto flags = arith::IntegerOverflowFlags::nsw | arith::IntegerOverflowFlags::nuw;
      Value w = cast(phase.warp), l = cast(phase.lane);
      bool divide = isa<arith::DivUIOp, arith::DivSIOp>(op);
      Value result;
      if (c == kWarpSize) {
        result = divide ? w : l;
      } else if (kWarpSize % c == 0) {
        result = divide
                     ? arith::AddIOp::create(
                           b, loc,
                           arith::MulIOp::create(b, loc, w, constant(kWarpSize / c), flags),
                           arith::DivUIOp::create(b, loc, l, constant(c)), flags)
                           .getResult()
                     : arith::RemUIOp::create(b, loc, l, constant(c)).getResult();
      } else {
        Value warps = constant(c / kWarpSize);
        result = divide
                     ? arith::DivUIOp::create(b, loc, w, warps).getResult()
                     : arith::AddIOp::create(
                           b, loc,
                           arith::MulIOp::create(
                               b, loc, arith::RemUIOp::create(b, loc, w, warps),
                               constant(kWarpSize), flags),
                           l, flags)
                           .getResult();
      }
      op->getResult(0).replaceAllUsesWith(result);
      op->erase();
    }
  }
}

LogicalResult KernelEmulation::run() {
  if (failed(check())) return failure();
  // Vector accumulators as one value per element: what lifted loops carry,
  // and what phases keep, is then scalars.
  splitCarriedVectors(kernel_);
  // The prologue goes before an op that stays where it is (the kernel's
  // first op may move into a phase): the constant 0, created first.
  OpBuilder start = OpBuilder::atBlockBegin(&body_);
  Value zero = arith::ConstantIndexOp::create(start, kernel_.getLoc(), 0);
  constants_[0] = zero;
  prologue_.insert(zero.getDefiningOp());
  entry_.setInsertionPoint(zero.getDefiningOp());
  if (failed(replaceSharedMemory())) return failure();
  cutIntoPhases();

  Location loc = kernel_.getLoc();
  IndexType index = entry_.getIndexType();
  unsigned n = kernel_.getNumArguments();
  if (failed(kernel_.insertArgument(n, index, {}, loc)) ||
      failed(kernel_.insertArgument(n + 1, index, {}, loc)))
    return failure();
  buildLoops();
  if (failed(rewriteOperands())) return failure();
  moveOpsAndKeepValues();
  foldWarpArithmetic();
  // A phase where only thread 0 (or lane 0 of each warp) writes runs that
  // one: a loop of one iteration, which canonicalize removes. LLVM no
  // longer compiles (and vectorizes, as masked scatters) a loop of 32
  // iterations that store nothing but in the first.
  for (Phase &phase : phases_)
    if (phase.loop && !phase.lifted.outer && onlyFirstIterationActs(phase.loop))
      phase.loop.setUpperBound(indexConstant(1));
  for (Phase &phase : phases_)
    if (phase.loop) markThreadsIndependent(phase.loop);
  for (scf::ForOp loop : exchangeLoops_) markThreadsIndependent(loop);

  // The barriers are the loop structure now; the grid queries are unused.
  SmallVector<Operation *> dead;
  kernel_.walk([&](Operation *op) {
    if (isGridQuery(op) || getSyncKind(op)) dead.push_back(op);
  });
  // A shuffle may use a grid query or an earlier shuffle: those uses go
  // first.
  for (Operation *op : dead) op->dropAllReferences();
  for (Operation *op : dead) {
    if (!op->use_empty())
      return op->emitOpError("xla-emulate-grid: still used outside the phases");
    op->erase();
  }
  return success();
}

struct EmulateGridPass : impl::EmulateGridPassBase<EmulateGridPass> {
  using EmulateGridPassBase::EmulateGridPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    SmallVector<func::FuncOp> kernels = findKernels(module);
    llvm::DenseSet<Operation *> isKernel(kernels.begin(), kernels.end());

    // Only kernels run on the grid: device code elsewhere has no thread.
    WalkResult outside = module.walk([&](Operation *op) -> WalkResult {
      auto func = op->getParentOfType<func::FuncOp>();
      if (!func || isKernel.contains(func)) return WalkResult::advance();
      if (isGridQuery(op) || getSyncKind(op))
        return op->emitOpError("outside a kernel cannot be emulated on the "
                               "host (inline @")
               << func.getSymName() << " into its kernel)";
      return WalkResult::advance();
    });
    if (outside.wasInterrupted()) return signalPassFailure();

    SymbolTableCollection symbols;
    SymbolTable &table = symbols.getSymbolTable(module);
    for (func::FuncOp kernel : kernels) {
      std::string name = kernel.getSymName().str();
      for (StringRef suffix : {"_host", "_host_blocks", "_host_serial_blocks"})
        if (table.lookup(name + suffix.str())) {
          kernelError(kernel) << "the symbol @" << name << suffix
                              << " is taken";
          return signalPassFailure();
        }
      FailureOr<int64_t> threadsPerBlock =
          launchDimension<gpu::ThreadIdOp>(kernel, threads, "threads");
      if (failed(threadsPerBlock)) return signalPassFailure();
      FailureOr<int64_t> gridBlocks =
          launchDimension<gpu::BlockIdOp>(kernel, blocks, "blocks");
      if (failed(gridBlocks)) return signalPassFailure();

      auto ptr = LLVM::LLVMPointerType::get(ctx);
      unsigned numArgs = kernel.getNumArguments();
      for (Type type : kernel.getArgumentTypes())
        if (type != ptr) {
          kernelError(kernel) << "kernel arguments must be !llvm.ptr (run "
                                 "xla-lower-tensors first), got "
                              << type;
          return signalPassFailure();
        }
      KernelEmulation emulation(kernel, *threadsPerBlock, *gridBlocks, symbols);
      if (failed(emulation.run())) return signalPassFailure();
      if (failed(table.rename(kernel, name + "_host_blocks")))
        return signalPassFailure();
      auto cInterface = StringAttr::get(ctx, "llvm.emit_c_interface");
      kernel->setAttr(cInterface, UnitAttr::get(ctx));
      kernel->removeAttr("xla.entry");

      // @k_host(%args): the whole grid; %args points to the kernel's
      // arguments, one pointer each (the packed ABI of a host kernel).
      Location loc = kernel.getLoc();
      OpBuilder b(ctx);
      b.setInsertionPointAfter(kernel);
      auto host = func::FuncOp::create(b, loc, name + "_host",
                                       b.getFunctionType({ptr}, {}));
      host->setAttr(cInterface, UnitAttr::get(ctx));
      host->setAttr("xla.threads_per_block",
                    b.getI64IntegerAttr(*threadsPerBlock));
      host->setAttr("xla.blocks", b.getI64IntegerAttr(*gridBlocks));
      host->setAttr("xla.num_args", b.getI64IntegerAttr(numArgs));
      table.insert(host);
      b.setInsertionPointToStart(host.addEntryBlock());
      Value packed = host.getArgument(0);
      SmallVector<Value> args;
      for (unsigned i = 0; i < numArgs; ++i) {
        Value slot = LLVM::GEPOp::create(
            b, loc, ptr, ptr, packed,
            ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)},
            LLVM::GEPNoWrapFlags::inbounds);
        args.push_back(LLVM::LoadOp::create(b, loc, ptr, slot));
      }
      args.push_back(arith::ConstantIndexOp::create(b, loc, 0));
      args.push_back(arith::ConstantIndexOp::create(b, loc, *gridBlocks));
      // The whole grid runs on one host thread: where the kernel has
      // atomics, it calls a copy whose atomics are plain read-modify-writes
      // (x86 has no atomic float add: each one was a locked cmpxchg loop).
      func::FuncOp whole = kernel;
      if (hasAtomics(kernel)) {
        OpBuilder before(host);
        whole = cast<func::FuncOp>(before.clone(*kernel));
        whole.setSymName(name + "_host_serial_blocks");
        whole.setPrivate();
        whole->removeAttr(cInterface);
        table.insert(whole);
        if (failed(serializeAtomics(whole))) return signalPassFailure();
      }
      func::CallOp::create(b, loc, whole, args);
      func::ReturnOp::create(b, loc);
    }

    // Shared-memory globals are per-block buffers now.
    for (auto global : llvm::make_early_inc_range(module.getOps<LLVM::GlobalOp>())) {
      if (global.getAddrSpace() != kSharedMemorySpace) continue;
      if (!SymbolTable::symbolKnownUseEmpty(global, module)) {
        global.emitOpError("shared memory used outside a kernel cannot be "
                           "emulated on the host");
        return signalPassFailure();
      }
      table.erase(global);
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
