// Malformed #xla_gpu.indexing_map text: each case ends in a diagnostic that
// points into the string, never in a crash.
// RUN: xla-gpu-opt %s --split-input-file --verify-diagnostics

// expected-error @+1 {{invalid indexing map: expected ', domain:' with a range for every dimension and symbol}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(d0) -> (d0)">}

// -----

// expected-error @+1 {{unknown identifier 'd1' (not a dimension or symbol of this map)}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(d0) -> (d1), domain: d0 in [0, 1]">}

// -----

// expected-error @+1 {{unknown identifier 'x'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [0, 1], x in [0, 3]">}

// -----

// expected-error @+1 {{duplicate variable name 'a'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a, a) -> (a), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{duplicate variable name 'a'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a)[a] -> (a), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{missing range for dimension 'b' in the domain}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a, b) -> (a), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{missing range for symbol 's0' in the domain}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a)[s0] -> (a), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{the range of 'a' is given twice}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, 1], a in [0, 2]">}

// -----

// expected-error @+1 {{non-affine product: one side of '*' must be a constant}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a, b) -> (a * b), domain: a in [0, 1], b in [0, 1]">}

// -----

// expected-error @+1 {{the divisor of 'mod' must be a positive constant}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a mod 0), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{the divisor of 'floordiv' must be a positive constant}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a floordiv -2), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{the divisor of 'ceildiv' must be a positive constant}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a, b) -> (a ceildiv b), domain: a in [0, 1], b in [1, 2]">}

// -----

// expected-error @+1 {{integer 99999999999999999999 does not fit in 64 bits}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, 99999999999999999999]">}

// -----

// expected-error @+1 {{integer 9223372036854775808 does not fit in 64 bits}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a + 9223372036854775808), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{expected '->' after the variable lists, found '('}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) (a), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{expected an affine expression, found '$'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> ($), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{expected ']' to close a range, found ','}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, 1, 2]">}

// -----

// expected-error @+1 {{expected 'in' after a domain expression, found '['}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a [0, 1]">}

// -----

// expected-error @+1 {{expected ',' between domain entries, found 'extra'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, 1] extra">}

// -----

// expected-error @+1 {{expected 'domain', found 'range'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), range: a in [0, 1]">}

// -----

// expected-error @+1 {{expected a dimension or symbol name, found 'mod'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(mod) -> (mod), domain: mod in [0, 1]">}

// -----

// expected-error @+1 {{expected '(' to open the dimension list, found end of map}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"">}

// -----

// expected-error @+1 {{expected ')' to close the parenthesized expression, found ','}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> ((a, a)), domain: a in [0, 1]">}

// -----

// expected-error @+1 {{expected an integer, found 'b'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, b]">}

// -----

// expected-error @+1 {{expected a quoted indexing map}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<5>}

// -----

// expected-error @+1 {{expected '<'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map}

// -----

// expected-error @+1 {{unbalanced '<' character in pretty dialect name}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, 1]" }

// -----

// expected-error @+1 {{unknown attribute `indexing_mop` in dialect `xla_gpu`}}
func.func private @f() attributes {m = #xla_gpu.indexing_mop<"(a) -> (a), domain: a in [0, 1]">}

// -----

// The error points at the offending character inside the string.
// expected-error @+1 {{unknown identifier 'zz'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a + zz), domain: a in [0, 1]">}

// -----

// An unterminated string is the lexer's error.
// expected-error @+1 {{expected '"' in string literal}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a), domain: a in [0, 1]>}
