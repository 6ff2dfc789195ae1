//===- IndexingMapSimplify.cpp - range-aware simplification ---------------===//
//
// Expressions are brought to a sum of atoms (dimensions, symbols, and
// floordiv/ceildiv/mod terms) times coefficients plus a constant. Division
// and modulo split off the parts that are multiples of the divisor and use the
// ranges of the rest: `(d0 * 4 + s0) floordiv 4` is `d0` when s0 is in
// [0, 3]. Modulo can also be expanded (`e mod c = e - (e floordiv c) * c`) so
// that linearized indices cancel, `(x floordiv 8) * 4096 + (x mod 8) * 512`
// being `x * 512`; the expanded form is kept only when it is simpler.
//
//===----------------------------------------------------------------------===//

#include <numeric>

#include "IndexingMap.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MathExtras.h"
#include "mlir/IR/MLIRContext.h"

namespace mlir::xla_gpu {
namespace {

struct LinearSum {
  llvm::SmallVector<std::pair<AffineExpr, int64_t>> terms;
  int64_t constant = 0;
};

class Simplifier {
public:
  Simplifier(const IndexingMap &map, bool expandMods)
      : map(map), ctx(map.getContext()), expandMods(expandMods) {}

  // Returns a null expression when arithmetic overflowed.
  AffineExpr run(AffineExpr expr) {
    LinearSum sum = toSum(expr);
    if (overflow) return {};
    return toExpr(sum);
  }

private:
  int64_t mul(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) overflow = true;
    return r;
  }
  int64_t add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) overflow = true;
    return r;
  }

  void addTerm(LinearSum &sum, AffineExpr atom, int64_t coeff) {
    if (coeff == 0) return;
    for (auto &[a, k] : sum.terms) {
      if (a == atom) {
        k = add(k, coeff);
        return;
      }
    }
    sum.terms.push_back({atom, coeff});
  }
  void addSum(LinearSum &into, const LinearSum &other, int64_t scale) {
    for (auto &[a, k] : other.terms) addTerm(into, a, mul(k, scale));
    into.constant = add(into.constant, mul(other.constant, scale));
  }

  Interval range(const LinearSum &sum) {
    Interval r{sum.constant, sum.constant};
    for (auto &[a, k] : sum.terms) {
      Interval t = map.evaluateRange(a);
      if (t.isEmpty()) return t;
      int64_t lo = mul(t.lower, k), hi = mul(t.upper, k);
      if (k < 0) std::swap(lo, hi);
      r = {add(r.lower, lo), add(r.upper, hi)};
    }
    return r;
  }

  static LinearSum atomSum(AffineExpr atom) {
    LinearSum s;
    s.terms.push_back({atom, 1});
    return s;
  }

  LinearSum toSum(AffineExpr expr) {
    LinearSum sum;
    switch (expr.getKind()) {
    case AffineExprKind::Constant:
      sum.constant = cast<AffineConstantExpr>(expr).getValue();
      return sum;
    case AffineExprKind::DimId:
    case AffineExprKind::SymbolId:
      return atomSum(expr);
    default:
      break;
    }
    auto bin = cast<AffineBinaryOpExpr>(expr);
    LinearSum lhs = toSum(bin.getLHS());
    LinearSum rhs = toSum(bin.getRHS());
    switch (expr.getKind()) {
    case AffineExprKind::Add:
      addSum(lhs, rhs, 1);
      return lhs;
    case AffineExprKind::Mul:
      if (rhs.terms.empty()) {
        addSum(sum, lhs, rhs.constant);
        return sum;
      }
      if (lhs.terms.empty()) {
        addSum(sum, rhs, lhs.constant);
        return sum;
      }
      return atomSum(toExpr(lhs) * toExpr(rhs));
    default:
      break;
    }
    if (!rhs.terms.empty() || rhs.constant <= 0)  // not a valid divisor
      return atomSum(expr);
    int64_t c = rhs.constant;
    switch (expr.getKind()) {
    case AffineExprKind::FloorDiv:
      return floorDiv(lhs, c);
    case AffineExprKind::Mod:
      return mod(lhs, c);
    default: {
      // ceildiv: a constant when the whole range lands on one value.
      Interval r = range(lhs);
      if (!r.isEmpty() && llvm::divideCeilSigned(r.lower, c) ==
                              llvm::divideCeilSigned(r.upper, c)) {
        sum.constant = llvm::divideCeilSigned(r.lower, c);
        return sum;
      }
      return atomSum(toExpr(lhs).ceilDiv(c));
    }
    }
  }

  // `sum` as g * multiples + small, g a proper divisor of c shared by some
  // coefficients and small in [0, g - 1], if there is such a g.
  struct Split {
    int64_t g;
    LinearSum multiples, small;
  };
  std::optional<Split> splitByDivisorOf(const LinearSum &sum, int64_t c) {
    for (auto &[a, k] : sum.terms) {
      int64_t g = std::gcd(std::abs(k), c);
      if (g <= 1 || g == c) continue;
      Split split{g, {}, {}};
      split.small.constant = sum.constant;
      for (auto &[b, kb] : sum.terms) {
        if (kb % g == 0) addTerm(split.multiples, b, kb / g);
        else addTerm(split.small, b, kb);
      }
      Interval r = range(split.small);
      if (!r.isEmpty() && r.lower >= 0 && r.upper < g) return split;
    }
    return std::nullopt;
  }

  // `num floordiv c` as a sum.
  LinearSum floorDiv(const LinearSum &num, int64_t c) {
    if (c == 1) return num;
    LinearSum quotient, rest;
    for (auto &[a, k] : num.terms) {
      if (k % c == 0) addTerm(quotient, a, k / c);
      else addTerm(rest, a, k);
    }
    quotient.constant = llvm::divideFloorSigned(num.constant, c);
    rest.constant = llvm::mod(num.constant, c);

    Interval r = range(rest);
    if (!r.isEmpty() && llvm::divideFloorSigned(r.lower, c) ==
                            llvm::divideFloorSigned(r.upper, c)) {
      quotient.constant =
          add(quotient.constant, llvm::divideFloorSigned(r.lower, c));
      return quotient;
    }
    // (g * G + S) floordiv c == G floordiv (c / g) when g divides c and S
    // stays in [0, g - 1]: `(th_x * 4 + s0) floordiv 8` is th_x floordiv 2.
    if (auto split = splitByDivisorOf(rest, c)) {
      addSum(quotient, floorDiv(split->multiples, c / split->g), 1);
      return quotient;
    }
    // (x floordiv a) floordiv c == x floordiv (a * c).
    if (rest.constant == 0 && rest.terms.size() == 1 &&
        rest.terms[0].second == 1 &&
        rest.terms[0].first.getKind() == AffineExprKind::FloorDiv) {
      auto inner = cast<AffineBinaryOpExpr>(rest.terms[0].first);
      auto a = cast<AffineConstantExpr>(inner.getRHS()).getValue();
      addSum(quotient, floorDiv(toSum(inner.getLHS()), mul(a, c)), 1);
      return quotient;
    }
    addTerm(quotient, toExpr(rest).floorDiv(c), 1);
    return quotient;
  }

  // `num mod c` as a sum.
  LinearSum mod(const LinearSum &num, int64_t c) {
    LinearSum rest;
    if (c == 1) return rest;
    for (auto &[a, k] : num.terms)
      if (int64_t kr = llvm::mod(k, c)) addTerm(rest, a, kr);
    rest.constant = llvm::mod(num.constant, c);
    Interval r = range(rest);
    if (!r.isEmpty() && r.lower >= 0 && r.upper < c) return rest;
    // A range inside one period: subtract the period.
    if (!r.isEmpty() && llvm::divideFloorSigned(r.lower, c) ==
                            llvm::divideFloorSigned(r.upper, c)) {
      rest.constant =
          add(rest.constant, -mul(llvm::divideFloorSigned(r.lower, c), c));
      return rest;
    }
    // (g * G + S) mod c == (G mod (c / g)) * g + S when g divides c and S
    // stays in [0, g - 1]: `(th_x * 4 + s0) mod 8` is (th_x mod 2) * 4 + s0.
    if (auto split = splitByDivisorOf(rest, c)) {
      addSum(split->small, mod(split->multiples, c / split->g), split->g);
      return split->small;
    }
    // (x mod a) mod c == x mod c when c divides a.
    if (rest.constant == 0 && rest.terms.size() == 1 &&
        rest.terms[0].second == 1 &&
        rest.terms[0].first.getKind() == AffineExprKind::Mod) {
      auto inner = cast<AffineBinaryOpExpr>(rest.terms[0].first);
      auto a = cast<AffineConstantExpr>(inner.getRHS()).getValue();
      if (a % c == 0) return mod(toSum(inner.getLHS()), c);
    }
    if (!expandMods) return atomSum(toExpr(rest) % c);
    // rest - (rest floordiv c) * c
    LinearSum expanded = rest;
    addSum(expanded, floorDiv(rest, c), -c);
    return expanded;
  }

  // Compound atoms, then dimensions, then symbols (each in order), then the
  // constant: one canonical order, so that simplification is idempotent.
  AffineExpr toExpr(const LinearSum &sum) {
    // Compound atoms first, as emitters write them (`(bl_x mod 8) * 512 +
    // th_x * 4 + vector_index`), ordered by their text: the order must not
    // depend on how the terms were collected, nor differ between processes.
    // Keys are computed once per term.
    auto rank = [](AffineExpr a) -> std::tuple<int, unsigned, std::string> {
      if (auto d = dyn_cast<AffineDimExpr>(a)) return {1, d.getPosition(), ""};
      if (auto s = dyn_cast<AffineSymbolExpr>(a))
        return {2, s.getPosition(), ""};
      std::string text;
      llvm::raw_string_ostream os(text);
      a.print(os);
      return {0, 0, text};
    };
    llvm::SmallVector<std::pair<std::tuple<int, unsigned, std::string>,
                                std::pair<AffineExpr, int64_t>>>
        terms;
    for (auto &term : sum.terms) terms.push_back({rank(term.first), term});
    std::stable_sort(terms.begin(), terms.end(),
                     [](auto &x, auto &y) { return x.first < y.first; });
    AffineExpr result;
    for (auto &[key, atomAndCoeff] : terms) {
      auto [a, k] = atomAndCoeff;
      if (k == 0) continue;
      AffineExpr term = k == 1 ? a : a * k;
      result = result ? result + term : term;
    }
    AffineExpr cst = getAffineConstantExpr(sum.constant, ctx);
    if (!result) return cst;
    return sum.constant == 0 ? result : result + cst;
  }

  const IndexingMap &map;
  MLIRContext *ctx;
  bool expandMods;
  bool overflow = false;
};

unsigned countDivisions(AffineExpr expr) {
  unsigned n = 0;
  expr.walk([&](AffineExpr e) {
    n += e.getKind() == AffineExprKind::FloorDiv ||
         e.getKind() == AffineExprKind::CeilDiv ||
         e.getKind() == AffineExprKind::Mod;
  });
  return n;
}

} // namespace

static AffineExpr simplifyOnce(const IndexingMap &map, AffineExpr expr) {
  AffineExpr plain = Simplifier(map, /*expandMods=*/false).run(expr);
  if (!plain) return expr;
  AffineExpr expanded = Simplifier(map, /*expandMods=*/true).run(expr);
  if (expanded && countDivisions(expanded) < countDivisions(plain))
    return expanded;
  return plain;
}

AffineExpr IndexingMap::simplifyExpr(AffineExpr expr) const {
  // MLIR's expression constructors fold on their own, which can expose more
  // (a gcd that only shows once a term cancelled): iterate to a fixpoint.
  for (int round = 0; round < 8; ++round) {
    AffineExpr next = simplifyOnce(*this, expr);
    if (next == expr) break;
    expr = next;
  }
  return expr;
}

bool IndexingMap::simplify() {
  llvm::SmallVector<AffineExpr> results;
  for (AffineExpr e : map.getResults()) results.push_back(simplifyExpr(e));
  AffineMap simplified =
      AffineMap::get(map.getNumDims(), map.getNumSymbols(), results,
                     map.getContext());
  std::vector<Constraint> kept;
  for (const Constraint &c : constraints) {
    AffineExpr e = simplifyExpr(c.expr);
    if (c.bounds.contains(evaluateRange(e))) continue;  // always holds
    kept.push_back({e, c.bounds});
  }
  IndexingMap next(simplified, dims, symbols, kept);
  if (next == *this) return false;
  *this = std::move(next);
  return true;
}

IndexingMap IndexingMap::compose(const IndexingMap &first,
                                 const IndexingMap &second) {
  MLIRContext *ctx = first.getContext();
  unsigned numSyms = first.getNumSymbols();
  // second's dims become first's results; its symbols follow first's.
  SmallVector<AffineExpr> dimRepl(first.getAffineMap().getResults());
  SmallVector<AffineExpr> symRepl;
  for (unsigned i = 0; i < second.getNumSymbols(); ++i)
    symRepl.push_back(getAffineSymbolExpr(numSyms + i, ctx));
  auto substitute = [&](AffineExpr e) {
    return e.replaceDimsAndSymbols(dimRepl, symRepl);
  };
  SmallVector<AffineExpr> results;
  for (AffineExpr e : second.getAffineMap().getResults())
    results.push_back(substitute(e));
  std::vector<Variable> dims = first.getDims(), symbols = first.getSymbols();
  llvm::append_range(symbols, second.getSymbols());
  std::vector<Constraint> constraints = first.getConstraints();
  for (const Constraint &c : second.getConstraints())
    constraints.push_back({substitute(c.expr), c.bounds});
  for (auto [result, dim] :
       llvm::zip(first.getAffineMap().getResults(), second.getDims()))
    constraints.push_back({result, dim.bounds});
  AffineMap map = AffineMap::get(dims.size(), symbols.size(), results, ctx);
  if (validate(map, dims, symbols, constraints)) {
    // Colliding names (both maps call a variable `s0` or `th_x`).
    for (Variable &v : dims) v.name.clear();
    for (Variable &v : symbols) v.name.clear();
  }
  IndexingMap composed(map, std::move(dims), std::move(symbols),
                       std::move(constraints));
  composed.simplify();
  return composed;
}

IndexingMap IndexingMap::withoutUnusedSymbols() const {
  llvm::SmallBitVector used(getNumSymbols());
  auto mark = [&](AffineExpr e) {
    e.walk([&](AffineExpr sub) {
      if (auto s = dyn_cast<AffineSymbolExpr>(sub)) used.set(s.getPosition());
    });
  };
  for (AffineExpr e : map.getResults()) mark(e);
  for (const Constraint &c : constraints) mark(c.expr);
  SmallVector<AffineExpr> symRepl;
  std::vector<Variable> kept;
  for (unsigned i = 0; i < getNumSymbols(); ++i) {
    symRepl.push_back(getAffineSymbolExpr(kept.size(), getContext()));
    if (used.test(i)) kept.push_back(symbols[i]);
  }
  SmallVector<AffineExpr> dimRepl;
  for (unsigned i = 0; i < getNumDims(); ++i)
    dimRepl.push_back(getAffineDimExpr(i, getContext()));
  SmallVector<AffineExpr> results;
  for (AffineExpr e : map.getResults())
    results.push_back(e.replaceDimsAndSymbols(dimRepl, symRepl));
  std::vector<Constraint> kept_constraints;
  for (const Constraint &c : constraints)
    kept_constraints.push_back(
        {c.expr.replaceDimsAndSymbols(dimRepl, symRepl), c.bounds});
  AffineMap newMap =
      AffineMap::get(getNumDims(), kept.size(), results, getContext());
  if (validate(newMap, dims, kept, kept_constraints))
    for (Variable &v : kept) v.name.clear();  // a renumbered default name
  return IndexingMap(newMap, dims, std::move(kept), std::move(kept_constraints));
}

IndexingMap IndexingMap::getLinearization(llvm::ArrayRef<int64_t> shape,
                                          MLIRContext *context) {
  AffineExpr linear = getAffineConstantExpr(0, context);
  int64_t stride = 1;
  std::vector<Variable> dims(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    linear = getAffineDimExpr(i, context) * stride + linear;
    stride *= shape[i];
    dims[i].bounds = {0, shape[i] - 1};
  }
  return IndexingMap(AffineMap::get(shape.size(), 0, linear, context),
                     std::move(dims), {});
}

} // namespace mlir::xla_gpu
