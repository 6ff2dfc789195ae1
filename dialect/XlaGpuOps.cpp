//===- XlaGpuOps.cpp - xla_gpu ops: syntax, verifiers, folds --------------===//

#include "XlaGpuDialect.h"

#include "llvm/ADT/DenseMap.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::xla_gpu {
namespace {

ParseResult parseIndexingMapAttr(OpAsmParser &parser, IndexingMapAttr &attr) {
  llvm::SMLoc loc = parser.getCurrentLocation();
  Attribute raw;
  if (parser.parseAttribute(raw)) return failure();
  attr = dyn_cast<IndexingMapAttr>(raw);
  if (!attr)
    return parser.emitError(loc, "expected an #xla_gpu.indexing_map, got ")
           << raw;
  return success();
}

// `(%a, %b)`; the comma may be left out (the reference walkthrough's transpose listing writes
// `(%thread_id_x %block_id_x)`).
ParseResult
parseDimOperands(OpAsmParser &parser,
                 SmallVectorImpl<OpAsmParser::UnresolvedOperand> &operands) {
  if (parser.parseLParen()) return failure();
  while (failed(parser.parseOptionalRParen())) {
    if (parser.parseOperand(operands.emplace_back())) return failure();
    (void)parser.parseOptionalComma();
  }
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// ApplyIndexingOp
//===----------------------------------------------------------------------===//

void ApplyIndexingOp::build(OpBuilder &builder, OperationState &result,
                            ValueRange operands, const IndexingMap &map) {
  result.addOperands(operands);
  result.getOrAddProperties<Properties>().indexing_map_attr =
      IndexingMapAttr::get(builder.getContext(), map);
  result.addTypes(
      SmallVector<Type>(map.getNumResults(), builder.getIndexType()));
}

ParseResult ApplyIndexingOp::parse(OpAsmParser &parser,
                                   OperationState &result) {
  IndexingMapAttr map;
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  if (parseIndexingMapAttr(parser, map) || parseDimOperands(parser, operands) ||
      parser.parseOperandList(operands, OpAsmParser::Delimiter::OptionalSquare) ||
      parser.parseOptionalAttrDict(result.attributes))
    return failure();
  Type index = parser.getBuilder().getIndexType();
  if (parser.resolveOperands(operands, index, result.operands))
    return failure();
  result.getOrAddProperties<Properties>().indexing_map_attr = map;
  result.addTypes(SmallVector<Type>(map.getIndexingMap().getNumResults(), index));
  return success();
}

void ApplyIndexingOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printAttribute(getIndexingMapAttr());
  unsigned numDims =
      std::min<unsigned>(getIndexingMap().getNumDims(), getNumOperands());
  p << '(' << getOperands().take_front(numDims) << ')';
  if (getNumOperands() > numDims)
    p << '[' << getOperands().drop_front(numDims) << ']';
  p.printOptionalAttrDict((*this)->getAttrs(), {"indexing_map_attr"});
}

LogicalResult ApplyIndexingOp::verify() {
  const IndexingMap &map = getIndexingMap();
  unsigned expected = map.getNumDims() + map.getNumSymbols();
  if (getNumOperands() != expected)
    return emitOpError("expects ")
           << expected << " operands (" << map.getNumDims()
           << " dimensions + " << map.getNumSymbols()
           << " symbols of the indexing map), got " << getNumOperands();
  if (getNumResults() != map.getNumResults())
    return emitOpError("expects one result per indexing map result (")
           << map.getNumResults() << "), got " << getNumResults();
  return success();
}

LogicalResult ApplyIndexingOp::fold(FoldAdaptor adaptor,
                                    SmallVectorImpl<OpFoldResult> &results) {
  const IndexingMap &map = getIndexingMap();
  if (map.isIdentity()) {
    results.append(getOperands().begin(), getOperands().end());
    return success();
  }
  // All results constant once the constant operands are substituted.
  MLIRContext *ctx = getContext();
  SmallVector<AffineExpr> dimRepl, symRepl;
  for (auto [i, attr] : llvm::enumerate(adaptor.getOperands())) {
    bool isDim = i < map.getNumDims();
    AffineExpr var = isDim ? getAffineDimExpr(i, ctx)
                           : getAffineSymbolExpr(i - map.getNumDims(), ctx);
    if (auto c = dyn_cast_or_null<IntegerAttr>(attr))
      var = getAffineConstantExpr(c.getInt(), ctx);
    (isDim ? dimRepl : symRepl).push_back(var);
  }
  SmallVector<OpFoldResult> folded;
  for (AffineExpr e : map.getAffineMap().getResults()) {
    auto c = dyn_cast<AffineConstantExpr>(e.replaceDimsAndSymbols(dimRepl, symRepl));
    if (!c) return failure();
    folded.push_back(IntegerAttr::get(IndexType::get(ctx), c.getValue()));
  }
  results.append(folded);
  return success();
}

namespace {

// Whether `a` comes before `b` in program order: block arguments before the
// ops of their block, an enclosing block's values before those of regions
// nested after them. Unrelated values compare as not before.
bool definedBefore(Value a, Value b) {
  auto owner = [](Value v) -> Operation * {
    if (auto arg = dyn_cast<BlockArgument>(v)) return arg.getOwner()->getParentOp();
    return v.getDefiningOp();
  };
  Block *blockA = a.getParentBlock(), *blockB = b.getParentBlock();
  if (blockA == blockB) {
    auto argA = dyn_cast<BlockArgument>(a), argB = dyn_cast<BlockArgument>(b);
    if (argA || argB)
      return argA && (!argB || argA.getArgNumber() < argB.getArgNumber());
    Operation *opA = a.getDefiningOp(), *opB = b.getDefiningOp();
    if (opA == opB)
      return cast<OpResult>(a).getResultNumber() < cast<OpResult>(b).getResultNumber();
    return opA->isBeforeInBlock(opB);
  }
  if (Operation *ownerB = owner(b))
    if (Operation *ancestor = blockA->findAncestorOpInBlock(*ownerB))
      return isa<BlockArgument>(a) || a.getDefiningOp() == ancestor ||
             a.getDefiningOp()->isBeforeInBlock(ancestor);
  if (Operation *ownerA = owner(a))
    if (Operation *ancestor = blockB->findAncestorOpInBlock(*ownerA))
      return !isa<BlockArgument>(b) && b.getDefiningOp() != ancestor &&
             ancestor->isBeforeInBlock(b.getDefiningOp());
  return false;
}

// Rebuilds an apply_indexing from its operands: constants are substituted
// into the map, an operand produced by another apply_indexing is replaced by
// that op's expression over its operands (composition, with its domain kept
// as constraints), a value passed twice becomes one variable (ranges
// intersect), unused variables disappear, and the result is simplified.
struct FoldApplyIndexingOperands : OpRewritePattern<ApplyIndexingOp> {
  using OpRewritePattern::OpRewritePattern;

  // The variables of the rebuilt map, one per distinct operand value.
  struct Variables {
    std::vector<Variable> dims, symbols;
    SmallVector<Value> dimValues, symbolValues;
    llvm::DenseMap<Value, AffineExpr> exprOf;
    bool merged = false;

    AffineExpr get(Value value, const Variable &var, bool asDim,
                   MLIRContext *ctx) {
      if (auto it = exprOf.find(value); it != exprOf.end()) {
        Variable &first = isa<AffineDimExpr>(it->second)
            ? dims[cast<AffineDimExpr>(it->second).getPosition()]
            : symbols[cast<AffineSymbolExpr>(it->second).getPosition()];
        first.bounds = first.bounds.intersect(var.bounds);
        merged = true;
        return it->second;
      }
      AffineExpr e = asDim ? getAffineDimExpr(dims.size(), ctx)
                           : getAffineSymbolExpr(symbols.size(), ctx);
      (asDim ? dims : symbols).push_back(var);
      (asDim ? dimValues : symbolValues).push_back(value);
      exprOf[value] = e;
      return e;
    }
  };

  LogicalResult matchAndRewrite(ApplyIndexingOp op,
                                PatternRewriter &rewriter) const override {
    const IndexingMap &map = op.getIndexingMap();
    MLIRContext *ctx = op.getContext();
    unsigned numDims = map.getNumDims();
    auto varOf = [&](unsigned i) -> const Variable & {
      return i < numDims ? map.getDims()[i] : map.getSymbols()[i - numDims];
    };

    // Symbols of this op stay symbols; everything else becomes a dimension.
    // Own dimensions are collected first so that they keep their order.
    Variables vars;
    SmallVector<AffineExpr> replacement(op.getNumOperands());
    std::vector<Constraint> extra;
    bool changed = false;
    SmallVector<std::pair<unsigned, ApplyIndexingOp>> producers;
    for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
      APInt cst;
      if (matchPattern(operand, m_ConstantInt(&cst))) {
        replacement[i] = getAffineConstantExpr(cst.getSExtValue(), ctx);
        changed = true;
      } else if (auto producer = operand.getDefiningOp<ApplyIndexingOp>()) {
        producers.push_back({static_cast<unsigned>(i), producer});
        changed = true;
      } else {
        replacement[i] = vars.get(operand, varOf(i), i < numDims, ctx);
      }
    }
    for (auto [i, producer] : producers) {
      const IndexingMap &inner = producer.getIndexingMap();
      SmallVector<AffineExpr> innerDims, innerSyms;
      for (auto [j, operand] : llvm::enumerate(producer.getOperands())) {
        bool isDim = j < inner.getNumDims();
        const Variable &v = isDim ? inner.getDims()[j]
                                  : inner.getSymbols()[j - inner.getNumDims()];
        (isDim ? innerDims : innerSyms)
            .push_back(vars.get(operand, v, /*asDim=*/true, ctx));
      }
      auto substitute = [&](AffineExpr e) {
        return e.replaceDimsAndSymbols(innerDims, innerSyms);
      };
      unsigned resultNumber = cast<OpResult>(op.getOperand(i)).getResultNumber();
      replacement[i] =
          substitute(inner.getAffineMap().getResult(resultNumber));
      // The producer's domain, and this operand's range, still restrict.
      for (const Constraint &c : inner.getConstraints())
        extra.push_back({substitute(c.expr), c.bounds});
      extra.push_back({replacement[i], varOf(i).bounds});
    }
    changed |= vars.merged;

    // Substitute and compact away unused variables. Own dims come before the
    // producers' variables, so positions only need renumbering.
    SmallVector<AffineExpr> dimRepl(replacement.begin(),
                                    replacement.begin() + numDims);
    SmallVector<AffineExpr> symRepl(replacement.begin() + numDims,
                                    replacement.end());
    SmallVector<AffineExpr> results;
    for (AffineExpr e : map.getAffineMap().getResults())
      results.push_back(e.replaceDimsAndSymbols(dimRepl, symRepl));
    std::vector<Constraint> constraints = extra;
    for (const Constraint &c : map.getConstraints())
      constraints.push_back({c.expr.replaceDimsAndSymbols(dimRepl, symRepl),
                             c.bounds});

    llvm::SmallBitVector usedDims(vars.dims.size()),
        usedSyms(vars.symbols.size());
    auto markUsed = [&](AffineExpr e) {
      e.walk([&](AffineExpr sub) {
        if (auto d = dyn_cast<AffineDimExpr>(sub)) usedDims.set(d.getPosition());
        if (auto s = dyn_cast<AffineSymbolExpr>(sub)) usedSyms.set(s.getPosition());
      });
    };
    llvm::for_each(results, markUsed);
    for (const Constraint &c : constraints) markUsed(c.expr);
    changed |= !usedDims.all() || !usedSyms.all();

    // After a composition, dimensions follow the program order of their
    // values (thread id before block id before an inner loop's induction
    // variable), whichever producer brought them in.
    SmallVector<unsigned> dimOrder;
    for (unsigned i = 0; i < vars.dims.size(); ++i)
      if (usedDims.test(i)) dimOrder.push_back(i);
    if (!producers.empty())
      std::stable_sort(dimOrder.begin(), dimOrder.end(), [&](unsigned a, unsigned b) {
        return definedBefore(vars.dimValues[a], vars.dimValues[b]);
      });
    SmallVector<AffineExpr> dimCompact(vars.dims.size()), symCompact;
    std::vector<Variable> keptDims, keptSyms;
    SmallVector<Value> operands;
    for (unsigned i : dimOrder) {
      dimCompact[i] = getAffineDimExpr(keptDims.size(), ctx);
      keptDims.push_back(vars.dims[i]);
      operands.push_back(vars.dimValues[i]);
    }
    for (AffineExpr &e : dimCompact)
      if (!e) e = getAffineConstantExpr(0, ctx);  // unused: never referenced
    for (unsigned i = 0; i < vars.symbols.size(); ++i) {
      symCompact.push_back(getAffineSymbolExpr(keptSyms.size(), ctx));
      if (!usedSyms.test(i)) continue;
      keptSyms.push_back(vars.symbols[i]);
      operands.push_back(vars.symbolValues[i]);
    }
    for (AffineExpr &e : results)
      e = e.replaceDimsAndSymbols(dimCompact, symCompact);
    for (Constraint &c : constraints)
      c.expr = c.expr.replaceDimsAndSymbols(dimCompact, symCompact);

    AffineMap newMap =
        AffineMap::get(keptDims.size(), keptSyms.size(), results, ctx);
    // Names that now collide (two producers' `th_x`, a kept `s1` renumbered
    // to `s0`) fall back to the defaults.
    if (IndexingMap::validate(newMap, keptDims, keptSyms, constraints)) {
      for (Variable &v : keptDims) v.name.clear();
      for (Variable &v : keptSyms) v.name.clear();
    }
    IndexingMap simplified(newMap, keptDims, keptSyms, constraints);
    changed |= simplified.simplify();
    if (!changed) return failure();
    rewriter.replaceOpWithNewOp<ApplyIndexingOp>(op, operands, simplified);
    return success();
  }
};

} // namespace

void ApplyIndexingOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                  MLIRContext *context) {
  results.add<FoldApplyIndexingOperands>(context);
}

//===----------------------------------------------------------------------===//
// LoopOp
//===----------------------------------------------------------------------===//

void LoopOp::build(OpBuilder &builder, OperationState &result,
                   IndexingMapAttr map, ValueRange dims, ValueRange inits) {
  result.addOperands(dims);
  result.addOperands(inits);
  auto &props = result.getOrAddProperties<Properties>();
  props.indexing_map_attr = map;
  props.operandSegmentSizes = {static_cast<int32_t>(dims.size()),
                               static_cast<int32_t>(inits.size())};
  result.addTypes(inits.getTypes());
  const IndexingMap &m = map.getIndexingMap();
  SmallVector<Type> argTypes(m.getNumSymbols() + m.getNumResults(),
                             builder.getIndexType());
  llvm::append_range(argTypes, inits.getTypes());
  Region *body = result.addRegion();
  OpBuilder::InsertionGuard guard(builder);
  builder.createBlock(body, {}, argTypes,
                      SmallVector<Location>(argTypes.size(), result.location));
}

ParseResult LoopOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand> dims, inits;
  SmallVector<OpAsmParser::Argument> ivs, mapResults, iterArgs;
  SmallVector<Type> resultTypes;
  IndexingMapAttr map;
  Type index = parser.getBuilder().getIndexType();
  if (parseDimOperands(parser, dims) ||
      parser.parseArgumentList(ivs, OpAsmParser::Delimiter::OptionalSquare) ||
      parser.parseArrow() ||
      parser.parseArgumentList(mapResults, OpAsmParser::Delimiter::Paren) ||
      parser.parseKeyword("in") || parseIndexingMapAttr(parser, map))
    return failure();
  llvm::SMLoc initsLoc = parser.getCurrentLocation();
  if (succeeded(parser.parseOptionalKeyword("iter_args"))) {
    if (parser.parseAssignmentList(iterArgs, inits) ||
        parser.parseArrowTypeList(resultTypes))
      return failure();
    if (iterArgs.size() != resultTypes.size())
      return parser.emitError(initsLoc, "expected ")
             << iterArgs.size() << " result types for " << iterArgs.size()
             << " iter_args, got " << resultTypes.size();
  }
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  if (parser.resolveOperands(dims, index, result.operands) ||
      parser.resolveOperands(inits, resultTypes, initsLoc, result.operands))
    return failure();
  SmallVector<OpAsmParser::Argument> regionArgs;
  for (auto &arg : llvm::concat<OpAsmParser::Argument>(ivs, mapResults))
    regionArgs.push_back(arg), regionArgs.back().type = index;
  for (auto [arg, type] : llvm::zip(iterArgs, resultTypes))
    regionArgs.push_back(arg), regionArgs.back().type = type;
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, regionArgs)) return failure();
  LoopOp::ensureTerminator(*body, parser.getBuilder(), result.location);
  auto &props = result.getOrAddProperties<Properties>();
  props.indexing_map_attr = map;
  props.operandSegmentSizes = {static_cast<int32_t>(dims.size()),
                               static_cast<int32_t>(inits.size())};
  result.addTypes(resultTypes);
  return success();
}

void LoopOp::print(OpAsmPrinter &p) {
  Block *body = getBody();
  unsigned numIvs = std::min<unsigned>(getNumInductionVars(),
                                       body->getNumArguments());
  auto args = body->getArguments();
  p << " (" << getDims() << ")";
  if (numIvs > 0) {
    p << '[';
    llvm::interleaveComma(args.take_front(numIvs), p,
                          [&](BlockArgument a) { p.printOperand(a); });
    p << ']';
  }
  unsigned numIter = std::min<unsigned>(getInits().size(), args.size() - numIvs);
  p << " -> (";
  llvm::interleaveComma(args.drop_front(numIvs).drop_back(numIter), p,
                        [&](BlockArgument a) { p.printOperand(a); });
  p << ") in ";
  p.printAttribute(getIndexingMapAttr());
  if (!getInits().empty()) {
    p << " iter_args(";
    llvm::interleaveComma(
        llvm::zip(args.take_back(numIter), getInits()), p, [&](auto pair) {
          p.printOperand(std::get<0>(pair));
          p << " = ";
          p.printOperand(std::get<1>(pair));
        });
    p << ") -> (" << getResultTypes() << ')';
  }
  p.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(), {"indexing_map_attr", "operandSegmentSizes"});
  p << ' ';
  p.printRegion(getRegion(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/!getInits().empty());
}

LogicalResult LoopOp::verifyRegions() {
  const IndexingMap &map = getIndexingMap();
  if (getDims().size() != map.getNumDims())
    return emitOpError("expects ")
           << map.getNumDims() << " dimension operands (the indexing map's "
           << "dimensions), got " << getDims().size();
  Block *body = getBody();
  unsigned expectedArgs =
      map.getNumSymbols() + map.getNumResults() + getInits().size();
  if (body->getNumArguments() != expectedArgs)
    return emitOpError("expects ")
           << map.getNumSymbols() << " induction variables (the map's "
           << "symbols) and " << map.getNumResults()
           << " map results (the map's results), got "
           << int64_t(body->getNumArguments()) - int64_t(getInits().size())
           << " values in total";
  for (BlockArgument arg : body->getArguments().drop_back(getInits().size()))
    if (!arg.getType().isIndex())
      return emitOpError("induction variables and map results must be index");
  for (auto [i, arg, init] :
       llvm::enumerate(getRegionIterArgs(), getInits()))
    if (arg.getType() != init.getType())
      return emitOpError("iter_arg #") << i << " has type " << arg.getType()
                                      << " but its init has type "
                                      << init.getType();
  if (getResultTypes() != getInits().getTypes())
    return emitOpError("result types must match the iter_args types");
  auto yield = cast<YieldOp>(body->getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return yield.emitOpError("yields (")
           << yield.getValues().getTypes() << ") but the loop carries ("
           << getResultTypes() << ")";
  return success();
}

LogicalResult LoopOp::canonicalize(LoopOp op, PatternRewriter &rewriter) {
  // No iteration runs: the results are the inits.
  if (op.getIndexingMap().isKnownEmpty()) {
    rewriter.replaceOp(op, op.getInits());
    return success();
  }
  IndexingMap map = op.getIndexingMap();
  if (!map.simplify()) return failure();
  rewriter.modifyOpInPlace(op, [&] {
    op.setIndexingMapAttrAttr(IndexingMapAttr::get(op.getContext(), map));
  });
  return success();
}

void LoopOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  if (getNumResults() > 0) setNameFn(getResult(0), "xla_loop");
}

// Induction variables print with their symbol's name (`%vector_index`),
// map results as `%dim`, iteration arguments as `%iter`.
void LoopOp::getAsmBlockArgumentNames(Region &region,
                                      OpAsmSetValueNameFn setNameFn) {
  // Also called to print unverified ops: check before trusting the IR.
  if (region.empty() || !getProperties().indexing_map_attr) return;
  const IndexingMap &map = getIndexingMap();
  Block &body = region.front();
  unsigned numIvs = std::min<unsigned>(map.getNumSymbols(), body.getNumArguments());
  for (unsigned i = 0; i < numIvs; ++i) {
    std::string name = map.getSymbols()[i].name;
    setNameFn(body.getArgument(i), name.empty() ? "s" : name);
  }
  unsigned numIter = std::min<unsigned>(getInits().size(),
                                        body.getNumArguments() - numIvs);
  for (BlockArgument arg :
       body.getArguments().drop_front(numIvs).drop_back(numIter))
    setNameFn(arg, "dim");
  for (BlockArgument arg : body.getArguments().take_back(numIter))
    setNameFn(arg, "iter");
}

//===----------------------------------------------------------------------===//
// PureCallOp
//===----------------------------------------------------------------------===//

void PureCallOp::build(OpBuilder &builder, OperationState &result,
                       func::FuncOp callee, ValueRange operands) {
  result.addOperands(operands);
  result.getOrAddProperties<Properties>().callee =
      FlatSymbolRefAttr::get(callee);
  result.addTypes(callee.getResultTypes());
}

LogicalResult PureCallOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto callee =
      symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!callee)
    return emitOpError("'") << getCallee()
                            << "' does not reference a func.func in scope";
  FunctionType type = callee.getFunctionType();
  if (type.getNumInputs() != getNumOperands())
    return emitOpError("passes ") << getNumOperands() << " operands but @"
                                  << getCallee() << " takes "
                                  << type.getNumInputs();
  for (auto [i, expected, actual] :
       llvm::enumerate(type.getInputs(), getOperandTypes()))
    if (expected != actual)
      return emitOpError("operand #") << i << " has type " << actual << " but @"
                                      << getCallee() << " expects " << expected;
  if (type.getNumResults() != getNumResults())
    return emitOpError("has ") << getNumResults() << " results but @"
                               << getCallee() << " returns "
                               << type.getNumResults();
  for (auto [i, expected, actual] :
       llvm::enumerate(type.getResults(), getResultTypes()))
    if (expected != actual)
      return emitOpError("result #") << i << " has type " << actual << " but @"
                                     << getCallee() << " returns " << expected;
  return success();
}

void PureCallOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  if (getNumResults() > 0) setNameFn(getResult(0), "pure_call");
}

//===----------------------------------------------------------------------===//
// AllocateSharedOp, SyncThreadsOp
//===----------------------------------------------------------------------===//

void AllocateSharedOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getResult(), "shmem");
}

LogicalResult SyncThreadsOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  llvm::append_range(inferred, operands.getTypes());
  return success();
}

void SyncThreadsOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  if (getNumResults() > 0) setNameFn(getResult(0), "synced_tensor");
}

//===----------------------------------------------------------------------===//
// ShuffleReduceOp
//===----------------------------------------------------------------------===//

void ShuffleReduceOp::build(OpBuilder &builder, OperationState &result,
                            func::FuncOp combiner, ValueRange operands,
                            int64_t maxDistance) {
  result.addOperands(operands);
  auto &props = result.getOrAddProperties<Properties>();
  props.combiner = FlatSymbolRefAttr::get(combiner);
  props.max_distance = builder.getI64IntegerAttr(maxDistance);
  result.addTypes(operands.getTypes());
}

// `(%a, %b) to 16 combiner=@fn : f32, i32`
ParseResult ShuffleReduceOp::parse(OpAsmParser &parser,
                                   OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  SmallVector<Type> types;
  int64_t maxDistance;
  FlatSymbolRefAttr combiner;
  llvm::SMLoc operandsLoc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands, OpAsmParser::Delimiter::Paren) ||
      parser.parseKeyword("to") || parser.parseInteger(maxDistance) ||
      parser.parseKeyword("combiner") || parser.parseEqual() ||
      parser.parseAttribute(combiner) ||
      parser.parseOptionalAttrDict(result.attributes) ||
      parser.parseColonTypeList(types) ||
      parser.resolveOperands(operands, types, operandsLoc, result.operands))
    return failure();
  auto &props = result.getOrAddProperties<Properties>();
  props.combiner = combiner;
  props.max_distance = parser.getBuilder().getI64IntegerAttr(maxDistance);
  result.addTypes(types);
  return success();
}

void ShuffleReduceOp::print(OpAsmPrinter &p) {
  p << '(' << getOperands() << ") to " << getMaxDistance() << " combiner=";
  p.printAttributeWithoutType(getCombinerAttr());
  p.printOptionalAttrDict((*this)->getAttrs(), {"combiner", "max_distance"});
  p << " : " << getOperandTypes();
}

LogicalResult ShuffleReduceOp::verify() {
  int64_t distance = getMaxDistance();
  if (distance < 1 || distance > 16 || !llvm::isPowerOf2_64(distance))
    return emitOpError("max_distance must be a power of two in [1, 16], got ")
           << distance;
  if (getOperands().empty())
    return emitOpError("needs at least one operand");
  for (auto [i, type] : llvm::enumerate(getOperandTypes())) {
    bool scalar = type.isIndex() ||
                  (type.isIntOrFloat() && type.getIntOrFloatBitWidth() <= 64);
    if (!scalar)
      return emitOpError("operand #")
             << i << " has type " << type
             << "; lanes exchange integers, floats or index of at most 64 "
                "bits";
  }
  if (getResultTypes() != getOperandTypes())
    return emitOpError("result types (")
           << getResultTypes() << ") must be the operand types ("
           << getOperandTypes() << ")";
  return success();
}

LogicalResult
ShuffleReduceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto callee =
      symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCombinerAttr());
  if (!callee)
    return emitOpError("combiner '")
           << getCombiner() << "' does not reference a func.func in scope";
  FunctionType type = callee.getFunctionType();
  SmallVector<Type> inputs(getOperandTypes());
  llvm::append_range(inputs, getOperandTypes());
  if (type.getInputs() != ArrayRef<Type>(inputs) ||
      !llvm::equal(type.getResults(), getOperandTypes()))
    return emitOpError("combiner @")
           << getCombiner() << " has type " << type << "; expected "
           << FunctionType::get(getContext(), inputs,
                                SmallVector<Type>(getOperandTypes()))
           << " (the lane's values, then the other lane's)";
  return success();
}

//===----------------------------------------------------------------------===//
// PredicatedInsertOp, PredicatedExtractOp
//===----------------------------------------------------------------------===//

namespace {

LogicalResult verifyIndexCount(Operation *op, RankedTensorType type,
                               size_t numIndices) {
  if (static_cast<int64_t>(numIndices) != type.getRank())
    return op->emitOpError("expects ")
           << type.getRank() << " indices (the rank of " << type << "), got "
           << numIndices;
  return success();
}

std::optional<bool> constantCondition(Value cond) {
  APInt value;
  if (!matchPattern(cond, m_ConstantInt(&value))) return std::nullopt;
  return !value.isZero();
}

} // namespace

LogicalResult PredicatedInsertOp::verify() {
  return verifyIndexCount(*this, getDest().getType(), getIndices().size());
}

OpFoldResult PredicatedInsertOp::fold(FoldAdaptor) {
  if (constantCondition(getCondition()) == false) return getDest();
  return {};
}

LogicalResult PredicatedInsertOp::canonicalize(PredicatedInsertOp op,
                                               PatternRewriter &rewriter) {
  if (constantCondition(op.getCondition()) != true) return failure();
  rewriter.replaceOpWithNewOp<tensor::InsertOp>(op, op.getValue(), op.getDest(),
                                                op.getIndices());
  return success();
}

LogicalResult PredicatedExtractOp::verify() {
  return verifyIndexCount(*this, getSrc().getType(), getIndices().size());
}

OpFoldResult PredicatedExtractOp::fold(FoldAdaptor) {
  if (constantCondition(getCondition()) == false) return getFallback();
  return {};
}

LogicalResult PredicatedExtractOp::canonicalize(PredicatedExtractOp op,
                                                PatternRewriter &rewriter) {
  if (constantCondition(op.getCondition()) != true) return failure();
  rewriter.replaceOpWithNewOp<tensor::ExtractOp>(op, op.getSrc(),
                                                 op.getIndices());
  return success();
}

//===----------------------------------------------------------------------===//
// AtomicRMWOp
//===----------------------------------------------------------------------===//

void AtomicRMWOp::build(OpBuilder &builder, OperationState &result,
                        Value input, ValueRange indices) {
  result.addOperands(input);
  result.addOperands(indices);
  result.addTypes(input.getType());
  Region *body = result.addRegion();
  OpBuilder::InsertionGuard guard(builder);
  Type element = cast<TensorType>(input.getType()).getElementType();
  builder.createBlock(body, {}, {element}, {result.location});
}

LogicalResult AtomicRMWOp::verify() {
  return verifyIndexCount(*this, getInput().getType(), getIndices().size());
}

LogicalResult AtomicRMWOp::verifyRegions() {
  Type element = getElementType();
  Block &body = getComputation().front();
  Type current = body.getNumArguments() == 1 ? body.getArgument(0).getType()
                                             : Type();
  // vector<N x element>: N consecutive elements of the innermost dimension.
  auto vector = dyn_cast_or_null<VectorType>(current);
  bool lanes = vector && vector.getRank() == 1 && !vector.isScalable() &&
               vector.getNumElements() >= 2 &&
               vector.getElementType() == element &&
               element.isIntOrFloat();
  if (current != element && !lanes)
    return emitOpError("the region takes one argument, the current value (")
           << element << ", or a vector of 2 or more " << element
           << " for consecutive elements)";
  auto yield = body.empty() ? nullptr : dyn_cast<YieldOp>(&body.back());
  if (!yield)
    return emitOpError("the region must end in xla_gpu.yield");
  if (yield.getValues().size() != 1 ||
      yield.getValues().front().getType() != current)
    return yield.emitOpError("yields (")
           << yield.getValues().getTypes() << ") but the atomic_rmw needs one "
           << current;
  if (lanes) {
    auto tensor = cast<RankedTensorType>(getInput().getType());
    int64_t minor = tensor.getRank() ? tensor.getShape().back() : 1;
    if (!ShapedType::isDynamic(minor) && minor < vector.getNumElements())
      return emitOpError("updates ")
             << vector.getNumElements()
             << " consecutive elements, more than the innermost dimension ("
             << minor << ") holds";
  }
  return success();
}

} // namespace mlir::xla_gpu

#define GET_OP_CLASSES
#include "XlaGpuOps.cpp.inc"
