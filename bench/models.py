"""Real training steps, written with flax (linen) and optax, compiled and run
side by side with XLA:CPU in one process.

Per model: the HLO lines of jax's pre-optimization text, then

  compile     `xla_gpu.compile(text, target="cpu", cache=False)` after the
              in-memory kernel cache is cleared (s, the best of
              --compile-repeat, alternating with XLA's, before either side
              has run anything); the first compile
              of the process also loads the compiler and is left out (a
              warm-up compile of a small program runs first)
  XLA:CPU     `jax.jit(step, keep_unused=True).lower(*args).compile()` with
              jax's persistent cache off (s, the best of --compile-repeat)
  run         median wall time of a step on the same arguments (ms), the
              cpu target's `exe.run(*leaves)` vs the compiled jax function,
              one of each in turn per round
  cuda        `xla_gpu.compile(text, target="cuda", cache=False)` (s): PTX
              and a cubin for sm_90 (no GPU needed), or why it failed; after
              every model's cpu measurements, since the first device code
              generation of a process switches the host code generation's
              LLVM setting (`xla_gpu.backends.llvm_options`)
  loss err    the step's scalar output (the loss), relative difference
  param err   the new parameters' largest difference, relative to the
              largest parameter

and the geometric means of the ratios, after a line naming the kernels of
numpy's OpenBLAS (the cpu target's larger products run on it; an
environment that forces an older family with OPENBLAS_CORETYPE slows them).
Sizes: --size small (default; what
the issue's table measured) or --size large (for a GPU machine: a step of
the large models needs more memory than a 24 GiB host has for both sides;
`--compile-only` measures their compiles alone, which need none).

    python bench/models.py [--only gpt,convnet] [--repeat 5] [--compile-repeat 3] [--no-cuda]
    python bench/models.py --size large --compile-only --no-cuda
    python bench/models.py --only gpt --gpt-layers 16 --compile-only --no-cuda
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any, Callable

import numpy as np
from benchlib import alternating_median_seconds, geomean

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _jax():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    return jax, jnp, nn, optax


def _train_step(model, tx, loss_of: Callable):
    """step(params, opt_state, batch) -> (params, opt_state, loss)."""
    jax, _, _, optax = _jax()

    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda p: loss_of(model, p, batch))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step


def gpt(size: str, layers: int | None = None):
    """A GPT-style LM: token and position embeddings, pre-LN blocks with
    causal self-attention and a GELU MLP, tied output; adamw. `layers`:
    another depth than the size's (--gpt-layers)."""
    jax, jnp, nn, optax = _jax()
    depth, width, heads, vocab, seq, batch = (4, 256, 4, 2048, 64, 8) if size == "small" \
        else (12, 768, 12, 32768, 512, 16)
    layers = depth if layers is None else layers

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + nn.MultiHeadDotProductAttention(num_heads=heads)(h, h, mask=mask)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(width)(nn.gelu(nn.Dense(4 * width)(h)))

    class Gpt(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            embed = nn.Embed(vocab, width)
            x = embed(tokens) + self.param("pos", nn.initializers.normal(0.02),
                                           (seq, width))
            for _ in range(layers):
                x = Block()(x)
            return embed.attend(nn.LayerNorm()(x))

    def loss_of(model, params, batch):
        logits = model.apply(params, batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    model, tx = Gpt(), optax.adamw(3e-4)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, seq + 1), 0, vocab)
    params = model.init(jax.random.PRNGKey(0), tokens[:, :-1])
    return _train_step(model, tx, loss_of), (params, tx.init(params), tokens)


def convnet(size: str):
    """Three convolutions with group norm, average pooling, a dense head;
    sgd with momentum."""
    jax, jnp, nn, optax = _jax()
    batch, side, channels = (16, 32, 32) if size == "small" else (128, 64, 128)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            for k in range(3):
                x = nn.Conv(channels * (k + 1), (3, 3))(x)
                x = nn.relu(nn.GroupNorm(num_groups=8)(x))
                x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    def loss_of(model, params, batch):
        images, labels = batch
        return optax.softmax_cross_entropy_with_integer_labels(
            model.apply(params, images), labels).mean()

    model, tx = Net(), optax.sgd(0.01, momentum=0.9)
    images = jax.random.normal(jax.random.PRNGKey(1), (batch, side, side, 3))
    labels = jax.random.randint(jax.random.PRNGKey(2), (batch,), 0, 10)
    params = model.init(jax.random.PRNGKey(0), images)
    return _train_step(model, tx, loss_of), (params, tx.init(params), (images, labels))


def lstm(size: str):
    """An LSTM language model through nn.RNN over 64 steps; adam."""
    jax, jnp, nn, optax = _jax()
    vocab, width, steps, batch = (256, 128, 64, 16) if size == "small" \
        else (8192, 1024, 256, 64)

    class Lm(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            x = nn.Embed(vocab, width)(tokens)
            x = nn.RNN(nn.OptimizedLSTMCell(width))(x)
            return nn.Dense(vocab)(x)

    def loss_of(model, params, batch):
        logits = model.apply(params, batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    model, tx = Lm(), optax.adam(1e-3)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, steps + 1), 0, vocab)
    params = model.init(jax.random.PRNGKey(0), tokens[:, :-1])
    return _train_step(model, tx, loss_of), (params, tx.init(params), tokens)


def dpsgd(size: str):
    """DP-SGD: per-example gradients by vmap over a 784-512-256-10 MLP,
    each clipped to norm 1, summed, noised; sgd."""
    jax, jnp, nn, optax = _jax()
    batch = 32 if size == "small" else 256

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(512)(x))
            x = nn.relu(nn.Dense(256)(x))
            return nn.Dense(10)(x)

    model, tx = Mlp(), optax.sgd(0.1)

    def step(params, opt_state, batch_data):
        images, labels, key = batch_data

        def one(p, x, y):
            logits = model.apply(p, x[None])
            return optax.softmax_cross_entropy_with_integer_labels(logits, y[None]).mean()
        grads = jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(params, images, labels)
        leaves = jax.tree_util.tree_leaves(grads)
        norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
        scale = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
        keys = iter(jax.random.split(key, len(leaves)))
        summed = jax.tree_util.tree_map(
            lambda g: (jnp.tensordot(scale, g, axes=1) +
                       jax.random.normal(next(keys), g.shape[1:])) / images.shape[0], grads)
        updates, opt_state = tx.update(summed, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, norms.mean()

    images = jax.random.normal(jax.random.PRNGKey(1), (batch, 784))
    labels = jax.random.randint(jax.random.PRNGKey(2), (batch,), 0, 10)
    params = model.init(jax.random.PRNGKey(0), images[:1])
    return step, (params, tx.init(params), (images, labels, jax.random.PRNGKey(3)))


def scanned_transformer(size: str):
    """Six transformer layers with stacked parameters, applied by nn.scan;
    a regression loss; adam."""
    jax, jnp, nn, optax = _jax()
    layers, width, heads, seq, batch = (6, 128, 4, 32, 8) if size == "small" \
        else (24, 1024, 16, 256, 32)

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.LayerNorm()(x)
            x = x + nn.SelfAttention(num_heads=heads)(h)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(width)(nn.gelu(nn.Dense(2 * width)(h))), None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            scanned = nn.scan(Layer, variable_axes={"params": 0}, split_rngs={"params": True},
                              length=layers)
            x, _ = scanned()(x, None)
            return x

    def loss_of(model, params, batch):
        x, y = batch
        return jnp.mean((model.apply(params, x) - y) ** 2)

    model, tx = Stack(), optax.adam(1e-3)
    x = jax.random.normal(jax.random.PRNGKey(1), (batch, seq, width))
    y = jax.random.normal(jax.random.PRNGKey(2), (batch, seq, width))
    params = model.init(jax.random.PRNGKey(0), x)
    return _train_step(model, tx, loss_of), (params, tx.init(params), (x, y))


MODELS = {"gpt": gpt, "convnet": convnet, "lstm": lstm, "dpsgd": dpsgd,
          "scanned_transformer": scanned_transformer}


def measure(name: str, size: str, repeat: int, compile_repeat: int,
            compile_only: bool = False) -> dict[str, Any]:
    import xla_gpu
    jax, _, _, _ = _jax()
    step, args = MODELS[name](size)
    lowered = jax.jit(step, keep_unused=True).lower(*args)
    text = lowered.as_text(dialect="hlo")
    # Compiles first, before either side's runtime has run (XLA:CPU's
    # worker threads keep spinning a while after a run, on the cores a
    # compile would use), alternating; jax's in-memory caches cleared so
    # that XLA compiles each time.
    def xla():
        jax.clear_caches()
        fresh = jax.jit(step, keep_unused=True).lower(*args)
        start = time.perf_counter()
        return fresh.compile(), time.perf_counter() - start

    def ours():
        xla_gpu.compiler.clear_memory_cache()
        start = time.perf_counter()
        return xla_gpu.compile(text, target="cpu", cache=False), time.perf_counter() - start

    xla_compile = ours_compile = float("inf")
    for i in range(compile_repeat):
        # (each side first in every other round)
        for side in ((xla, ours) if i % 2 == 0 else (ours, xla)):
            made, seconds = side()
            if side is xla:
                compiled, xla_compile = made, min(xla_compile, seconds)
            else:
                exe, ours_compile = made, min(ours_compile, seconds)
    row = {"model": name, "lines": text.count("\n"), "compile": ours_compile,
           "xla_compile": xla_compile, "kernels": len(exe.kernels), "text": text}
    if compile_only:
        return row
    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(args)]
    result = compiled(*args)
    expected = [np.asarray(x) for x in jax.tree_util.tree_leaves(result)]
    # The step returns (params, opt_state, loss or a scalar): its new
    # parameters are the first leaves, the scalar the last.
    num_params = len(jax.tree_util.tree_leaves(result[0]))
    got = exe.run(*leaves)
    xla_run, ours_run = alternating_median_seconds(
        [lambda: jax.block_until_ready(compiled(*args)), lambda: exe.run(*leaves)], repeat)
    # Errors: the scalar relative to its magnitude; the new parameters by
    # the largest difference relative to the largest parameter (a leaf whose
    # gradient is rounding noise, such as attention's key bias, whose
    # gradient is 0 in exact arithmetic, gets an update of either sign of
    # the learning rate's size: per leaf it would look 100% wrong).
    got64 = [np.asarray(a, np.float64) for a in got]
    want64 = [np.asarray(b, np.float64) for b in expected]
    scale = max(float(np.max(np.abs(b))) for b in want64[:num_params] if b.size)
    param_err = max(float(np.max(np.abs(a - b))) for a, b in
                    zip(got64[:num_params], want64[:num_params]) if a.size) / scale
    loss_err = float(abs(got64[-1] - want64[-1]).max() / max(abs(want64[-1]).max(), 1e-30))
    row.update(run=ours_run, xla_run=xla_run, param_err=param_err, loss_err=loss_err)
    return row


def cuda_compile(text: str) -> str:
    import xla_gpu
    xla_gpu.compiler.clear_memory_cache()
    start = time.perf_counter()
    try:
        xla_gpu.compile(text, target="cuda", cache=False)
        return f"{time.perf_counter() - start:.1f} s"
    except xla_gpu.XlaGpuError as e:
        return f"fails: {str(e).splitlines()[0][:90]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--size", choices=["small", "large"], default="small")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compile-repeat", type=int, default=3,
                        help="compiles per model on each side (the best counts)")
    parser.add_argument("--no-cuda", action="store_true", help="skip the cuda compile")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile both sides, run neither")
    parser.add_argument("--gpt-layers", type=int, default=None,
                        help="gpt's depth instead of the size's (compile time grows with it)")
    args = parser.parse_args()
    if args.gpt_layers is not None:
        if args.gpt_layers < 1:
            parser.error("--gpt-layers: at least 1")
        MODELS["gpt"] = functools.partial(gpt, layers=args.gpt_layers)
    jax = _jax()[0]
    jax.config.update("jax_enable_compilation_cache", False)

    import xla_gpu
    # Loads the compiler (MLIR, the passes) once, outside the measurements.
    xla_gpu.compile(open(os.path.join(os.path.dirname(__file__), "..", "examples",
                                      "mlp_train_step.hlo")).read(), target="cpu",
                    cache=False)
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    # The cpu target's products run on numpy's BLAS: which kernels it runs
    # (OPENBLAS_CORETYPE forces a family; an older one halves f32 speed on
    # AVX-512 hosts) decides its gemm times. XLA:CPU does not use it.
    from xla_gpu.runtime.host_blas import openblas_core
    print(f"numpy's BLAS: {'OpenBLAS ' + openblas_core() if openblas_core() else 'not OpenBLAS'}"
          f" (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')})\n")
    print("| model | HLO lines | kernels | compile (s) | XLA:CPU compile (s) | ratio | "
          "run (ms) | XLA:CPU run (ms) | ratio | cuda compile | loss err | param err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    compile_ratios, run_ratios = [], []
    rows = [measure(name, args.size, args.repeat, args.compile_repeat, args.compile_only)
            for name in names]
    for r in rows:
        r["cuda"] = "-" if args.no_cuda else cuda_compile(r["text"])
        compile_ratios.append(r["compile"] / r["xla_compile"])
        ran = "run" in r
        if ran:
            run_ratios.append(r["run"] / r["xla_run"])
        run = (f"{r['run'] * 1e3:.1f} | {r['xla_run'] * 1e3:.1f} | {run_ratios[-1]:.2f}x"
               if ran else "- | - | -")
        errors = f"{r['loss_err']:.1e} | {r['param_err']:.1e}" if ran else "- | -"
        model = r["model"] if r["model"] != "gpt" or args.gpt_layers is None else \
            f"gpt ({args.gpt_layers} layers)"
        print(f"| {model} | {r['lines']} | {r['kernels']} | {r['compile']:.2f} | "
              f"{r['xla_compile']:.2f} | {compile_ratios[-1]:.2f}x | {run} | {r['cuda']} | "
              f"{errors} |", flush=True)
    runs = (f", run {geomean(run_ratios):.2f}x (max {max(run_ratios):.2f}x)"
            if run_ratios else "")
    print(f"\ngeomean: compile {geomean(compile_ratios):.2f}x XLA:CPU (max "
          f"{max(compile_ratios):.2f}x){runs}")


if __name__ == "__main__":
    main()
