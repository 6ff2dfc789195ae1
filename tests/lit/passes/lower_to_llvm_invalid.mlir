// Left-over structured control flow cannot be lowered here.
// RUN: xla-gpu-opt %s --xla-lower-to-llvm --verify-diagnostics

func.func @f(%c: i1) {
  // expected-error @+1 {{failed to legalize operation 'scf.if'}}
  scf.if %c {
  }
  return
}
