//===- IndexingMap.cpp - parsing, printing and ranges of indexing maps ----===//

#include "IndexingMap.h"

#include <limits>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"
#include "mlir/IR/MLIRContext.h"

namespace mlir::xla_gpu {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Interval bounds saturate instead of overflowing: a saturated bound is still
// a sound (if loose) bound.
int64_t satAdd(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return (a > 0) ? kMax : kMin;
}
int64_t satMul(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return ((a < 0) != (b < 0)) ? kMin : kMax;
}

bool isValidName(llvm::StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name[0]) || name[0] == '_'))
    return false;
  for (char c : name)
    if (!(llvm::isAlnum(c) || c == '_')) return false;
  return name != "floordiv" && name != "ceildiv" && name != "mod" &&
         name != "in" && name != "domain";
}

std::optional<std::string> checkPureAffine(AffineExpr expr) {
  std::optional<std::string> error;
  expr.walk([&](AffineExpr e) {
    auto bin = dyn_cast<AffineBinaryOpExpr>(e);
    if (!bin || e.getKind() == AffineExprKind::Add || error) return;
    auto rhs = dyn_cast<AffineConstantExpr>(bin.getRHS());
    if (e.getKind() == AffineExprKind::Mul) {
      if (!rhs && !isa<AffineConstantExpr>(bin.getLHS()))
        error = "non-affine product of two non-constant expressions";
      return;
    }
    if (!rhs || rhs.getValue() <= 0)
      error = "the divisor of floordiv, ceildiv and mod must be a positive "
              "constant";
  });
  return error;
}

} // namespace

//===----------------------------------------------------------------------===//
// Construction and queries
//===----------------------------------------------------------------------===//

static std::string defaultName(char prefix, unsigned i) {
  return prefix + std::to_string(i);
}

IndexingMap::IndexingMap(AffineMap map, std::vector<Variable> dims,
                         std::vector<Variable> symbols,
                         std::vector<Constraint> constraints)
    : map(map), dims(std::move(dims)), symbols(std::move(symbols)) {
  // Names equal to the defaults are stored as "" so that `(d0) -> (d0)` and
  // a map built without names are the same attribute.
  for (auto [i, d] : llvm::enumerate(this->dims))
    if (d.name == defaultName('d', i)) d.name.clear();
  for (auto [i, s] : llvm::enumerate(this->symbols))
    if (s.name == defaultName('s', i)) s.name.clear();
  for (Constraint &c : constraints) {
    Variable *var = nullptr;
    if (auto d = dyn_cast<AffineDimExpr>(c.expr))
      var = &this->dims[d.getPosition()];
    else if (auto s = dyn_cast<AffineSymbolExpr>(c.expr))
      var = &this->symbols[s.getPosition()];
    if (var)
      var->bounds = var->bounds.intersect(c.bounds);
    else
      this->constraints.push_back(std::move(c));
  }
}

std::string IndexingMap::getDimName(unsigned i) const {
  return dims[i].name.empty() ? defaultName('d', i) : dims[i].name;
}
std::string IndexingMap::getSymbolName(unsigned i) const {
  return symbols[i].name.empty() ? defaultName('s', i) : symbols[i].name;
}

std::optional<std::string>
IndexingMap::validate(AffineMap map, const std::vector<Variable> &dims,
                      const std::vector<Variable> &symbols,
                      const std::vector<Constraint> &constraints) {
  if (!map) return std::string("null affine map");
  if (map.getNumDims() != dims.size())
    return "the map has " + std::to_string(map.getNumDims()) +
           " dimensions but " + std::to_string(dims.size()) +
           " dimension ranges were given";
  if (map.getNumSymbols() != symbols.size())
    return "the map has " + std::to_string(map.getNumSymbols()) +
           " symbols but " + std::to_string(symbols.size()) +
           " symbol ranges were given";
  llvm::StringSet<> seen;
  auto checkName = [&](const Variable &v, char prefix,
                       unsigned i) -> std::optional<std::string> {
    std::string name = v.name.empty() ? defaultName(prefix, i) : v.name;
    if (!isValidName(name)) return "invalid variable name '" + name + "'";
    if (!seen.insert(name).second) return "duplicate variable name '" + name + "'";
    return std::nullopt;
  };
  for (auto [i, d] : llvm::enumerate(dims))
    if (auto err = checkName(d, 'd', i)) return err;
  for (auto [i, s] : llvm::enumerate(symbols))
    if (auto err = checkName(s, 's', i)) return err;
  for (AffineExpr e : map.getResults())
    if (auto err = checkPureAffine(e)) return err;
  for (const Constraint &c : constraints) {
    if (!c.expr) return std::string("null constraint expression");
    if (auto err = checkPureAffine(c.expr)) return err;
    bool inRange = true;
    c.expr.walk([&](AffineExpr e) {
      if (auto d = dyn_cast<AffineDimExpr>(e))
        inRange &= d.getPosition() < dims.size();
      if (auto s = dyn_cast<AffineSymbolExpr>(e))
        inRange &= s.getPosition() < symbols.size();
    });
    if (!inRange)
      return std::string("a constraint uses a dimension or symbol the map "
                         "does not have");
  }
  return std::nullopt;
}

Interval IndexingMap::evaluateRange(AffineExpr expr) const {
  switch (expr.getKind()) {
  case AffineExprKind::Constant: {
    int64_t c = cast<AffineConstantExpr>(expr).getValue();
    return {c, c};
  }
  case AffineExprKind::DimId:
    return dims[cast<AffineDimExpr>(expr).getPosition()].bounds;
  case AffineExprKind::SymbolId:
    return symbols[cast<AffineSymbolExpr>(expr).getPosition()].bounds;
  default:
    break;
  }
  auto bin = cast<AffineBinaryOpExpr>(expr);
  Interval lhs = evaluateRange(bin.getLHS());
  Interval rhs = evaluateRange(bin.getRHS());
  if (lhs.isEmpty() || rhs.isEmpty()) return {0, -1};
  switch (expr.getKind()) {
  case AffineExprKind::Add:
    return {satAdd(lhs.lower, rhs.lower), satAdd(lhs.upper, rhs.upper)};
  case AffineExprKind::Mul: {
    int64_t p[4] = {satMul(lhs.lower, rhs.lower), satMul(lhs.lower, rhs.upper),
                    satMul(lhs.upper, rhs.lower), satMul(lhs.upper, rhs.upper)};
    return {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
  }
  default:
    break;
  }
  // Divisors are positive constants (checked by validate()).
  int64_t c = rhs.lower;
  if (c <= 0 || !rhs.isPoint()) return {kMin, kMax};
  switch (expr.getKind()) {
  case AffineExprKind::FloorDiv:
    return {llvm::divideFloorSigned(lhs.lower, c),
            llvm::divideFloorSigned(lhs.upper, c)};
  case AffineExprKind::CeilDiv:
    return {llvm::divideCeilSigned(lhs.lower, c),
            llvm::divideCeilSigned(lhs.upper, c)};
  case AffineExprKind::Mod:
    if (llvm::divideFloorSigned(lhs.lower, c) ==
        llvm::divideFloorSigned(lhs.upper, c))
      return {llvm::mod(lhs.lower, c), llvm::mod(lhs.upper, c)};
    return {0, c - 1};
  default:
    return {kMin, kMax};
  }
}

bool IndexingMap::isKnownEmpty() const {
  for (const Variable &v : dims)
    if (v.bounds.isEmpty()) return true;
  for (const Variable &v : symbols)
    if (v.bounds.isEmpty()) return true;
  for (const Constraint &c : constraints)
    if (c.bounds.intersect(evaluateRange(c.expr)).isEmpty()) return true;
  return false;
}

bool IndexingMap::isIdentity() const {
  return map.getNumSymbols() == 0 && constraints.empty() && map.isIdentity();
}

llvm::hash_code hash_value(const IndexingMap &m) {
  llvm::hash_code h = mlir::hash_value(m.getAffineMap());
  auto hashVars = [&](const std::vector<Variable> &vars) {
    for (const Variable &v : vars)
      h = llvm::hash_combine(h, v.bounds.lower, v.bounds.upper, v.name);
  };
  hashVars(m.getDims());
  hashVars(m.getSymbols());
  for (const Constraint &c : m.getConstraints())
    h = llvm::hash_combine(h, c.expr, c.bounds.lower, c.bounds.upper);
  return h;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {
enum class Binding { Weak, Strong };
} // namespace

static void printExprImpl(const IndexingMap &m, llvm::raw_ostream &os,
                          AffineExpr expr, Binding binding) {
  switch (expr.getKind()) {
  case AffineExprKind::Constant:
    os << cast<AffineConstantExpr>(expr).getValue();
    return;
  case AffineExprKind::DimId:
    os << m.getDimName(cast<AffineDimExpr>(expr).getPosition());
    return;
  case AffineExprKind::SymbolId:
    os << m.getSymbolName(cast<AffineSymbolExpr>(expr).getPosition());
    return;
  default:
    break;
  }
  auto bin = cast<AffineBinaryOpExpr>(expr);
  AffineExpr lhs = bin.getLHS(), rhs = bin.getRHS();
  bool parens = binding == Binding::Strong;
  if (parens) os << '(';
  if (expr.getKind() == AffineExprKind::Add) {
    printExprImpl(m, os, lhs, Binding::Weak);
    // `a + b * -c` prints as `a - b * c`, `a + -c` as `a - c`.
    if (auto mul = dyn_cast<AffineBinaryOpExpr>(rhs);
        mul && mul.getKind() == AffineExprKind::Mul) {
      if (auto c = dyn_cast<AffineConstantExpr>(mul.getRHS());
          c && c.getValue() < 0 && c.getValue() != kMin) {
        os << " - ";
        printExprImpl(m, os, mul.getLHS(), Binding::Strong);
        if (c.getValue() != -1) os << " * " << -c.getValue();
        if (parens) os << ')';
        return;
      }
    }
    if (auto c = dyn_cast<AffineConstantExpr>(rhs);
        c && c.getValue() < 0 && c.getValue() != kMin) {
      os << " - " << -c.getValue();
    } else {
      os << " + ";
      printExprImpl(m, os, rhs, Binding::Weak);
    }
    if (parens) os << ')';
    return;
  }
  if (expr.getKind() == AffineExprKind::Mul) {
    if (auto c = dyn_cast<AffineConstantExpr>(rhs); c && c.getValue() == -1) {
      os << '-';
      printExprImpl(m, os, lhs, Binding::Strong);
      if (parens) os << ')';
      return;
    }
  }
  printExprImpl(m, os, lhs, Binding::Strong);
  switch (expr.getKind()) {
  case AffineExprKind::Mul: os << " * "; break;
  case AffineExprKind::FloorDiv: os << " floordiv "; break;
  case AffineExprKind::CeilDiv: os << " ceildiv "; break;
  default: os << " mod "; break;
  }
  printExprImpl(m, os, rhs, Binding::Strong);
  if (parens) os << ')';
}

void IndexingMap::printExpr(llvm::raw_ostream &os, AffineExpr expr) const {
  printExprImpl(*this, os, expr, Binding::Weak);
}

void IndexingMap::print(llvm::raw_ostream &os) const {
  os << '(';
  llvm::interleaveComma(llvm::seq<unsigned>(0, getNumDims()), os,
                        [&](unsigned i) { os << getDimName(i); });
  os << ')';
  if (getNumSymbols() > 0) {
    os << '[';
    llvm::interleaveComma(llvm::seq<unsigned>(0, getNumSymbols()), os,
                          [&](unsigned i) { os << getSymbolName(i); });
    os << ']';
  }
  os << " -> (";
  llvm::interleaveComma(map.getResults(), os,
                        [&](AffineExpr e) { printExpr(os, e); });
  os << ')';
  if (dims.empty() && symbols.empty() && constraints.empty()) return;
  os << ", domain: ";
  bool first = true;
  auto item = [&](llvm::StringRef what, Interval b) {
    if (!first) os << ", ";
    first = false;
    os << what << " in [" << b.lower << ", " << b.upper << ']';
  };
  for (unsigned i = 0; i < getNumDims(); ++i) item(getDimName(i), dims[i].bounds);
  for (unsigned i = 0; i < getNumSymbols(); ++i)
    item(getSymbolName(i), symbols[i].bounds);
  for (const Constraint &c : constraints) {
    std::string text;
    llvm::raw_string_ostream s(text);
    printExpr(s, c.expr);
    item(text, c.bounds);
  }
}

std::string IndexingMap::toString() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  print(os);
  return text;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

struct Token {
  enum Kind { Ident, Int, Punct, Arrow, End, Error } kind;
  llvm::StringRef text;
  size_t pos;
};

class MapParser {
public:
  MapParser(llvm::StringRef text, MLIRContext *ctx) : text(text), ctx(ctx) {
    advance();
  }

  std::optional<IndexingMap> parse();

  size_t errorPos = 0;
  std::string errorMessage;

private:
  void advance();
  bool fail(const Token &at, const llvm::Twine &message) {
    if (errorMessage.empty()) {
      errorPos = at.pos;
      errorMessage = message.str();
    }
    return false;
  }
  std::string describe(const Token &t) const {
    if (t.kind == Token::End) return "end of map";
    return "'" + t.text.str() + "'";
  }
  bool isPunct(llvm::StringRef p) const {
    return tok.kind == Token::Punct && tok.text == p;
  }
  bool isKeyword(llvm::StringRef k) const {
    return tok.kind == Token::Ident && tok.text == k;
  }
  bool expectPunct(llvm::StringRef p, llvm::StringRef context) {
    if (!isPunct(p))
      return fail(tok, "expected '" + p + "' " + context + ", found " +
                           describe(tok));
    advance();
    return true;
  }
  bool parseNameList(llvm::StringRef close, std::vector<Variable> &vars);
  bool parseInt(int64_t &value);
  bool parseExpr(AffineExpr &expr);
  bool parseTerm(AffineExpr &expr);
  bool parseFactor(AffineExpr &expr);
  bool parseDomain(std::vector<Variable> &dims, std::vector<Variable> &symbols,
                   std::vector<Constraint> &constraints);

  llvm::StringRef text;
  MLIRContext *ctx;
  size_t cursor = 0;
  unsigned tokensRead = 0;
  Token tok{Token::End, "", 0};
  llvm::StringMap<AffineExpr> names;
};

void MapParser::advance() {
  ++tokensRead;
  while (cursor < text.size() && llvm::isSpace(text[cursor])) ++cursor;
  size_t start = cursor;
  if (cursor >= text.size()) {
    tok = {Token::End, "", start};
    return;
  }
  char c = text[cursor];
  if (llvm::isAlpha(c) || c == '_') {
    while (cursor < text.size() &&
           (llvm::isAlnum(text[cursor]) || text[cursor] == '_'))
      ++cursor;
    tok = {Token::Ident, text.slice(start, cursor), start};
  } else if (llvm::isDigit(c)) {
    while (cursor < text.size() && llvm::isDigit(text[cursor])) ++cursor;
    tok = {Token::Int, text.slice(start, cursor), start};
  } else if (c == '-' && cursor + 1 < text.size() && text[cursor + 1] == '>') {
    cursor += 2;
    tok = {Token::Arrow, "->", start};
  } else if (llvm::StringRef("()[],+-*:").contains(c)) {
    ++cursor;
    tok = {Token::Punct, text.slice(start, cursor), start};
  } else {
    ++cursor;
    tok = {Token::Error, text.slice(start, cursor), start};
  }
}

bool MapParser::parseNameList(llvm::StringRef close,
                              std::vector<Variable> &vars) {
  if (isPunct(close)) {
    advance();
    return true;
  }
  while (true) {
    if (tok.kind != Token::Ident || !isValidName(tok.text))
      return fail(tok, "expected a dimension or symbol name, found " +
                           describe(tok));
    if (names.count(tok.text))
      return fail(tok, "duplicate variable name '" + tok.text + "'");
    vars.push_back({Interval{0, -1}, tok.text.str()});
    names[tok.text] = AffineExpr();  // bound to an expr after both lists
    advance();
    if (isPunct(close)) {
      advance();
      return true;
    }
    if (!expectPunct(",", "between variable names")) return false;
  }
}

bool MapParser::parseInt(int64_t &value) {
  bool negative = false;
  Token start = tok;
  if (isPunct("-")) {
    negative = true;
    advance();
  }
  if (tok.kind != Token::Int)
    return fail(tok, "expected an integer, found " + describe(tok));
  uint64_t magnitude;
  if (tok.text.getAsInteger(10, magnitude) ||
      magnitude > (negative ? uint64_t(kMax) + 1 : uint64_t(kMax)))
    return fail(start, "integer " + tok.text + " does not fit in 64 bits");
  value = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
  advance();
  return true;
}

// expr := term (('+' | '-') term)*
bool MapParser::parseExpr(AffineExpr &expr) {
  if (!parseTerm(expr)) return false;
  while (isPunct("+") || isPunct("-")) {
    bool minus = isPunct("-");
    advance();
    AffineExpr rhs;
    if (!parseTerm(rhs)) return false;
    expr = minus ? expr - rhs : expr + rhs;
  }
  return true;
}

// term := factor (('*' | 'floordiv' | 'ceildiv' | 'mod') factor)*
bool MapParser::parseTerm(AffineExpr &expr) {
  if (!parseFactor(expr)) return false;
  while (true) {
    Token op = tok;
    bool mul = isPunct("*");
    if (!mul && !isKeyword("floordiv") && !isKeyword("ceildiv") &&
        !isKeyword("mod"))
      return true;
    advance();
    Token rhsTok = tok;
    AffineExpr rhs;
    if (!parseFactor(rhs)) return false;
    auto rhsConst = dyn_cast<AffineConstantExpr>(rhs);
    if (mul) {
      if (!rhsConst && !isa<AffineConstantExpr>(expr))
        return fail(op, "non-affine product: one side of '*' must be a "
                        "constant");
      expr = expr * rhs;
      continue;
    }
    if (!rhsConst || rhsConst.getValue() <= 0)
      return fail(rhsTok, "the divisor of '" + op.text +
                              "' must be a positive constant");
    if (op.text == "floordiv") expr = expr.floorDiv(rhs);
    else if (op.text == "ceildiv") expr = expr.ceilDiv(rhs);
    else expr = expr % rhs;
  }
}

// factor := '-' factor | integer | name | '(' expr ')'
bool MapParser::parseFactor(AffineExpr &expr) {
  if (isPunct("-")) {
    advance();
    if (!parseFactor(expr)) return false;
    expr = -expr;
    return true;
  }
  if (tok.kind == Token::Int) {
    int64_t v;
    if (!parseInt(v)) return false;
    expr = getAffineConstantExpr(v, ctx);
    return true;
  }
  if (tok.kind == Token::Ident) {
    auto it = names.find(tok.text);
    if (it == names.end())
      return fail(tok, "unknown identifier '" + tok.text +
                           "' (not a dimension or symbol of this map)");
    expr = it->second;
    advance();
    return true;
  }
  if (isPunct("(")) {
    advance();
    if (!parseExpr(expr)) return false;
    return expectPunct(")", "to close the parenthesized expression");
  }
  return fail(tok, "expected an affine expression, found " + describe(tok));
}

bool MapParser::parseDomain(std::vector<Variable> &dims,
                            std::vector<Variable> &symbols,
                            std::vector<Constraint> &constraints) {
  std::vector<bool> dimSeen(dims.size()), symSeen(symbols.size());
  while (tok.kind != Token::End) {
    Token start = tok;
    unsigned startIndex = tokensRead;
    AffineExpr expr;
    if (!parseExpr(expr)) return false;
    unsigned exprEnd = tokensRead;
    if (!isKeyword("in"))
      return fail(tok, "expected 'in' after a domain expression, found " +
                           describe(tok));
    advance();
    Interval bounds;
    if (!expectPunct("[", "to open a range") || !parseInt(bounds.lower) ||
        !expectPunct(",", "between range bounds") ||
        !parseInt(bounds.upper) || !expectPunct("]", "to close a range"))
      return false;
    // A bare variable (one identifier token) gives its range; anything
    // else, `(d0)` included, is a constraint.
    bool bare = start.kind == Token::Ident && exprEnd == startIndex + 1 &&
                (isa<AffineDimExpr>(expr) || isa<AffineSymbolExpr>(expr));
    if (bare) {
      std::vector<bool> &seen = isa<AffineDimExpr>(expr) ? dimSeen : symSeen;
      std::vector<Variable> &vars = isa<AffineDimExpr>(expr) ? dims : symbols;
      unsigned pos = isa<AffineDimExpr>(expr)
                         ? cast<AffineDimExpr>(expr).getPosition()
                         : cast<AffineSymbolExpr>(expr).getPosition();
      if (seen[pos])
        return fail(start, "the range of '" + start.text + "' is given twice");
      seen[pos] = true;
      vars[pos].bounds = bounds;
    } else {
      constraints.push_back({expr, bounds});
    }
    if (tok.kind == Token::End) break;
    if (!expectPunct(",", "between domain entries")) return false;
  }
  Token end = tok;
  for (auto [i, seen] : llvm::enumerate(dimSeen))
    if (!seen) return fail(end, "missing range for dimension '" +
                                    dims[i].name + "' in the domain");
  for (auto [i, seen] : llvm::enumerate(symSeen))
    if (!seen) return fail(end, "missing range for symbol '" +
                                    symbols[i].name + "' in the domain");
  return true;
}

std::optional<IndexingMap> MapParser::parse() {
  std::vector<Variable> dims, symbols;
  std::vector<Constraint> constraints;
  if (!expectPunct("(", "to open the dimension list") ||
      !parseNameList(")", dims))
    return std::nullopt;
  if (isPunct("[")) {
    advance();
    if (!parseNameList("]", symbols)) return std::nullopt;
  }
  for (auto [i, d] : llvm::enumerate(dims))
    names[d.name] = getAffineDimExpr(i, ctx);
  for (auto [i, s] : llvm::enumerate(symbols))
    names[s.name] = getAffineSymbolExpr(i, ctx);
  if (tok.kind != Token::Arrow) {
    fail(tok, "expected '->' after the variable lists, found " + describe(tok));
    return std::nullopt;
  }
  advance();
  if (!expectPunct("(", "to open the result list")) return std::nullopt;
  llvm::SmallVector<AffineExpr> results;
  if (isPunct(")")) {
    advance();
  } else {
    while (true) {
      AffineExpr e;
      if (!parseExpr(e)) return std::nullopt;
      results.push_back(e);
      if (isPunct(")")) {
        advance();
        break;
      }
      if (!expectPunct(",", "between results")) return std::nullopt;
    }
  }
  if (tok.kind == Token::End) {
    if (!dims.empty() || !symbols.empty()) {
      fail(tok, "expected ', domain:' with a range for every dimension and "
                "symbol");
      return std::nullopt;
    }
  } else {
    if (!expectPunct(",", "before 'domain:'")) return std::nullopt;
    if (!isKeyword("domain")) {
      fail(tok, "expected 'domain', found " + describe(tok));
      return std::nullopt;
    }
    advance();
    if (!expectPunct(":", "after 'domain'") ||
        !parseDomain(dims, symbols, constraints))
      return std::nullopt;
  }
  AffineMap map =
      AffineMap::get(dims.size(), symbols.size(), results, ctx);
  if (auto err = IndexingMap::validate(map, dims, symbols, constraints)) {
    fail(Token{Token::End, "", 0}, *err);
    return std::nullopt;
  }
  return IndexingMap(map, std::move(dims), std::move(symbols),
                     std::move(constraints));
}

} // namespace

std::optional<IndexingMap> IndexingMap::parse(llvm::StringRef text,
                                              MLIRContext *context,
                                              size_t &errorPos,
                                              std::string &errorMessage) {
  MapParser parser(text, context);
  auto result = parser.parse();
  if (!result) {
    errorPos = parser.errorPos;
    errorMessage = parser.errorMessage;
  }
  return result;
}

} // namespace mlir::xla_gpu
