//===- XlaGpuAttrs.cpp - #xla_gpu.indexing_map ----------------------------===//

#include "XlaGpuDialect.h"

#include "llvm/ADT/TypeSwitch.h"
#include "mlir/IR/DialectImplementation.h"

#define GET_ATTRDEF_CLASSES
#include "XlaGpuAttrs.cpp.inc"

namespace mlir::xla_gpu {

void XlaGpuDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "XlaGpuAttrs.cpp.inc"
      >();
}

// `<"part" "part" ...>`: adjacent strings are concatenated, as in the reference walkthrough's
// listings. Errors point at the offending character inside the string.
Attribute IndexingMapAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess()) return {};
  std::string text;
  // (offset in `text`, location of the opening quote) per string segment.
  llvm::SmallVector<std::pair<size_t, llvm::SMLoc>> segments;
  while (true) {
    llvm::SMLoc loc = parser.getCurrentLocation();
    std::string part;
    if (failed(parser.parseOptionalString(&part))) break;
    segments.push_back({text.size(), loc});
    text += part;
  }
  if (segments.empty()) {
    parser.emitError(parser.getCurrentLocation(),
                     "expected a quoted indexing map, e.g. "
                     "\"(d0) -> (d0), domain: d0 in [0, 9]\"");
    return {};
  }
  size_t errorPos = 0;
  std::string error;
  auto map = IndexingMap::parse(text, parser.getContext(), errorPos, error);
  if (!map) {
    auto seg = segments.front();
    for (auto s : segments)
      if (s.first <= errorPos) seg = s;
    // Offsets are exact unless the string held escape sequences.
    llvm::SMLoc loc = llvm::SMLoc::getFromPointer(
        seg.second.getPointer() + 1 + (errorPos - seg.first));
    std::string near = errorPos < text.size()
                           ? " (at offset " + std::to_string(errorPos) + ")"
                           : " (at the end of the map)";
    parser.emitError(loc, "invalid indexing map: " + error + near);
    return {};
  }
  if (parser.parseGreater()) return {};
  return IndexingMapAttr::get(parser.getContext(), *map);
}

void IndexingMapAttr::print(AsmPrinter &printer) const {
  printer << "<\"" << getIndexingMap().toString() << "\">";
}

LogicalResult
IndexingMapAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                        IndexingMap map) {
  if (auto err = IndexingMap::validate(map.getAffineMap(), map.getDims(),
                                       map.getSymbols(), map.getConstraints()))
    return emitError() << "invalid indexing map: " << *err;
  return success();
}

} // namespace mlir::xla_gpu
