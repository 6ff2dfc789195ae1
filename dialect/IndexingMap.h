//===- IndexingMap.h - affine maps with named, bounded variables ----------===//
//
// An IndexingMap is an AffineMap whose dimensions and symbols each carry a
// closed integer range and an optional name, plus constraints `expr in
// [lo, hi]` that restrict the domain further. It is the parameter of
// #xla_gpu.indexing_map and the basis of xla_gpu.loop / apply_indexing.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_DIALECT_INDEXINGMAP_H
#define XLA_GPU_DIALECT_INDEXINGMAP_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/AffineMap.h"

namespace mlir::xla_gpu {

/// A closed integer interval [lower, upper]; empty when lower > upper.
struct Interval {
  int64_t lower = 0;
  int64_t upper = 0;

  bool isEmpty() const { return lower > upper; }
  bool isPoint() const { return lower == upper; }
  bool contains(int64_t v) const { return lower <= v && v <= upper; }
  bool contains(const Interval &o) const {
    return o.isEmpty() || (lower <= o.lower && o.upper <= upper);
  }
  Interval intersect(const Interval &o) const {
    return {std::max(lower, o.lower), std::min(upper, o.upper)};
  }
  bool operator==(const Interval &o) const {
    return lower == o.lower && upper == o.upper;
  }
  bool operator!=(const Interval &o) const { return !(*this == o); }
};

/// A dimension or symbol: its range and the name it prints with ("" prints
/// as d<i> / s<i>).
struct Variable {
  Interval bounds;
  std::string name;
  bool operator==(const Variable &o) const {
    return bounds == o.bounds && name == o.name;
  }
};

struct Constraint {
  AffineExpr expr;
  Interval bounds;
  bool operator==(const Constraint &o) const {
    return expr == o.expr && bounds == o.bounds;
  }
};

class IndexingMap {
public:
  IndexingMap() = default;
  /// The parts must pass validate(). Default names (`d<i>`, `s<i>`) are
  /// stored empty, and a constraint on a bare dimension or symbol narrows
  /// that variable's range instead of being kept, so that every map has one
  /// form.
  IndexingMap(AffineMap map, std::vector<Variable> dims,
              std::vector<Variable> symbols,
              std::vector<Constraint> constraints = {});

  /// Checks the parts agree (one variable per dim/symbol, distinct valid
  /// names, pure affine results and constraints). Returns an error message,
  /// or std::nullopt when the map is well formed.
  static std::optional<std::string>
  validate(AffineMap map, const std::vector<Variable> &dims,
           const std::vector<Variable> &symbols,
           const std::vector<Constraint> &constraints);

  AffineMap getAffineMap() const { return map; }
  MLIRContext *getContext() const { return map.getContext(); }
  unsigned getNumDims() const { return map.getNumDims(); }
  unsigned getNumSymbols() const { return map.getNumSymbols(); }
  unsigned getNumResults() const { return map.getNumResults(); }
  const std::vector<Variable> &getDims() const { return dims; }
  const std::vector<Variable> &getSymbols() const { return symbols; }
  const std::vector<Constraint> &getConstraints() const { return constraints; }

  /// The name a dim / symbol prints with.
  std::string getDimName(unsigned i) const;
  std::string getSymbolName(unsigned i) const;

  /// The range of `expr` over the box of dim and symbol ranges (constraints
  /// are not used): sound, not always tight.
  Interval evaluateRange(AffineExpr expr) const;

  /// True when no point satisfies the ranges and constraints (as far as
  /// interval reasoning can tell).
  bool isKnownEmpty() const;

  /// True for `(d0, ..., dn) -> (d0, ..., dn)` with no symbols and no
  /// constraints.
  bool isIdentity() const;

  /// Range-aware simplification of one expression over this map's variables:
  /// `(d0 mod 8)` with d0 in [0, 7] is `d0`, `(d0 * 4 + s0) floordiv 4` with
  /// s0 in [0, 3] is `d0`, floordiv/mod pairs that recombine cancel.
  /// Equivalent on the domain; idempotent.
  AffineExpr simplifyExpr(AffineExpr expr) const;

  /// Simplifies every result and constraint; constraints that always hold
  /// are dropped. Returns true when the map changed.
  bool simplify();

  /// The map with the single result `expr` (over the same variables and
  /// ranges) and no constraints: what a loop lowered to scf evaluates once
  /// its bounds checks passed.
  IndexingMap withSingleResult(AffineExpr expr) const {
    return IndexingMap(AffineMap::get(getNumDims(), getNumSymbols(), expr,
                                      getContext()),
                       dims, symbols);
  }

  /// `second ∘ first`: first's results feed second's dimensions. The result
  /// has first's dimensions, then first's symbols followed by second's
  /// symbols; first's constraints stay, second's are substituted, and each
  /// first result must lie in the range of the dimension it feeds (kept as a
  /// constraint unless the ranges imply it). Simplified.
  static IndexingMap compose(const IndexingMap &first,
                             const IndexingMap &second);

  /// The map without the symbols that no result or constraint uses.
  IndexingMap withoutUnusedSymbols() const;

  /// `(d0, ..., dn) -> (d0 * stride0 + ... + dn)`: the row-major linear index
  /// of a tensor of `shape`, each di in [0, shape[i] - 1].
  static IndexingMap getLinearization(llvm::ArrayRef<int64_t> shape,
                                      MLIRContext *context);

  /// `(th_x, bl_x)[s0] -> (...), domain: th_x in [0, 127], ...`
  void print(llvm::raw_ostream &os) const;
  std::string toString() const;
  void printExpr(llvm::raw_ostream &os, AffineExpr expr) const;

  /// Parses the textual form. On failure returns std::nullopt and sets
  /// `errorPos` (an offset into `text`) and `errorMessage`.
  static std::optional<IndexingMap> parse(llvm::StringRef text,
                                          MLIRContext *context,
                                          size_t &errorPos,
                                          std::string &errorMessage);

  bool operator==(const IndexingMap &o) const {
    return map == o.map && dims == o.dims && symbols == o.symbols &&
           constraints == o.constraints;
  }
  bool operator!=(const IndexingMap &o) const { return !(*this == o); }

private:
  AffineMap map;
  std::vector<Variable> dims;
  std::vector<Variable> symbols;
  std::vector<Constraint> constraints;
};

llvm::hash_code hash_value(const IndexingMap &map);

inline llvm::raw_ostream &operator<<(llvm::raw_ostream &os,
                                     const IndexingMap &map) {
  map.print(os);
  return os;
}

} // namespace mlir::xla_gpu

#endif // XLA_GPU_DIALECT_INDEXINGMAP_H
