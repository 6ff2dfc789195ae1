// #xla_gpu.indexing_map: parse, print, and print again to the same text.
// RUN: xla-gpu-opt %s --mlir-print-local-scope | FileCheck %s
// RUN: xla-gpu-opt %s | xla-gpu-opt --mlir-print-local-scope | FileCheck %s
// RUN: xla-gpu-opt %s | FileCheck %s --check-prefix=ALIAS

// Names print as given, defaults (d<i>, s<i>) as such; constraints follow the
// ranges.
// CHECK-LABEL: @named
// CHECK-SAME: m = #xla_gpu.indexing_map<"(th_x, bl_x)[s0] -> (bl_x floordiv 4, th_x * 4 + s0), domain: th_x in [0, 127], bl_x in [0, 1023], s0 in [0, 3], th_x * 4 + s0 in [0, 511]">
func.func private @named() attributes {m = #xla_gpu.indexing_map<"(th_x, bl_x)[s0] -> (bl_x floordiv 4, th_x * 4 + s0), domain: th_x in [0, 127], bl_x in [0, 1023], s0 in [0, 3], th_x * 4 + s0 in [0, 511]">}

// CHECK-LABEL: @defaults
// CHECK-SAME: #xla_gpu.indexing_map<"(d0, d1)[s0, s1] -> (d0 + s1, d1 * 2 + s0), domain: d0 in [0, 9], d1 in [0, 19], s0 in [0, 1], s1 in [0, 3]">
func.func private @defaults() attributes {m = #xla_gpu.indexing_map<"(d0, d1)[s0, s1] -> (d0 + s1, d1 * 2 + s0), domain: d0 in [0, 9], d1 in [0, 19], s0 in [0, 1], s1 in [0, 3]">}

// Only symbols; no variables at all; no results.
// CHECK-LABEL: @only_symbols
// CHECK-SAME: #xla_gpu.indexing_map<"()[s0] -> (s0 * 8), domain: s0 in [0, 7]">
func.func private @only_symbols() attributes {m = #xla_gpu.indexing_map<"()[s0] -> (s0 * 8), domain: s0 in [0, 7]">}
// CHECK-LABEL: @constant
// CHECK-SAME: #xla_gpu.indexing_map<"() -> (42, -3)">
func.func private @constant() attributes {m = #xla_gpu.indexing_map<"() -> (42, -3)">}
// CHECK-LABEL: @no_results
// CHECK-SAME: #xla_gpu.indexing_map<"(d0) -> (), domain: d0 in [0, 0]">
func.func private @no_results() attributes {m = #xla_gpu.indexing_map<"(d0) -> (), domain: d0 in [0, 0]">}

// Negative bounds, subtraction, negation, every division kind, nesting.
// CHECK-LABEL: @arith
// CHECK-SAME: #xla_gpu.indexing_map<"(a, b) -> (a - b, a - 4, -a, a - b * 3, a ceildiv 3, (a + b) floordiv 2, (a mod 5) mod 3), domain: a in [-10, -1], b in [0, 100]">
func.func private @arith() attributes {m = #xla_gpu.indexing_map<"(a, b) -> (a - b, a - 4, -a, a - b * 3, a ceildiv 3, (a + b) floordiv 2, (a mod 5) mod 3), domain: a in [-10, -1], b in [0, 100]">}

// Adjacent string literals concatenate (the reference walkthrough writes maps that way);
// spacing is free.
// CHECK-LABEL: @split
// CHECK-SAME: #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 127], s0 in [0, 3]">
func.func private @split() attributes {m = #xla_gpu.indexing_map<"(d0)[s0] -> (" "d0*4+s0)," "domain:d0 in[0,127],s0 in [0 , 3]">}

// A constraint on a bare variable narrows its range.
// CHECK-LABEL: @bare_constraint
// CHECK-SAME: #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [2, 5]">
func.func private @bare_constraint() attributes {m = #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [0, 5], (d0) in [2, 10]">}

// Extreme 64-bit bounds survive.
// CHECK-LABEL: @extremes
// CHECK-SAME: domain: d0 in [-9223372036854775808, 9223372036854775807]
func.func private @extremes() attributes {m = #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [-9223372036854775808, 9223372036854775807]">}

// Equal maps are one attribute, printed once as an alias.
// ALIAS: #[[MAP:.*]] = #xla_gpu.indexing_map<"(d0) -> (d0 floordiv 2), domain: d0 in [0, 63]">
// ALIAS-LABEL: @alias
// ALIAS: xla_gpu.apply_indexing #[[MAP]](%arg0)
// ALIAS: xla_gpu.apply_indexing #[[MAP]](%arg1)
func.func @alias(%a: index, %b: index) -> (index, index) {
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 floordiv 2), domain: d0 in [0, 63]">(%a)
  %1 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 floordiv 2), domain: d0 in [0, 63]">(%b)
  return %0, %1 : index, index
}
