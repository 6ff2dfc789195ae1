# lit configuration of xla_gpu's IR tests. Tools come from the installed
# package (xla-gpu-opt, the mlir-opt plugin), FileCheck from the `filecheck`
# package (`not` is lit's builtin), mlir-opt from the MLIR tools wheel.
import importlib.util
import os
import shutil
import sys

import lit.formats

config.name = "xla_gpu"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test", ".hlo"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")
config.environment["PYTHONUNBUFFERED"] = "1"
# Diagnostics must not depend on the terminal.
config.environment.pop("MLIR_ENABLE_DUMP", None)
# The Python tools' pass managers verify after every pass, as xla-gpu-opt's
# do (by default they verify once, after the pipeline).
config.environment["XLA_GPU_VERIFY_EACH_PASS"] = "1"
# Hermetic: a fresh compile cache per lit run, never the user's ~/.cache.
import tempfile  # noqa: E402

config.environment["XLA_GPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="xla_gpu_lit_cache_")

import xla_gpu  # noqa: E402

native_bin = xla_gpu.native_dir() / "bin"
opt = native_bin / "xla-gpu-opt"
if not opt.exists():
    lit_config.fatal(f"xla-gpu-opt not found at {opt}: install xla_gpu first")


def _package_dir(name):
    spec = importlib.util.find_spec(name)
    for path in (spec.submodule_search_locations or []) if spec else []:
        return path
    return None


mlir_bin = os.path.join(_package_dir("mlir") or "", "bin")

filecheck = shutil.which("filecheck")
if not filecheck:
    lit_config.fatal("the `filecheck` command is missing: pip install filecheck")

config.substitutions.append(("%python", sys.executable))
# A whole word only: pass flags such as --xla-gpu-optimize-loops contain it.
config.substitutions.append((r"(?<![\w.-])xla-gpu-opt(?![\w-])", str(opt)))
config.substitutions.append(("FileCheck", filecheck))

translate = shutil.which("xla-gpu-translate")
if not translate:
    lit_config.fatal("xla-gpu-translate not found: install xla_gpu first")
config.substitutions.append((r"(?<![\w.-])xla-gpu-translate(?![\w-])", translate))

fusion_to_mlir = shutil.which("xla-gpu-fusion-to-mlir")
if not fusion_to_mlir:
    lit_config.fatal("xla-gpu-fusion-to-mlir not found: install xla_gpu first")
config.substitutions.append(
    (r"(?<![\w.-])xla-gpu-fusion-to-mlir(?![\w-])", fusion_to_mlir))

from xla_gpu.backends.cuda import codegen  # noqa: E402

ptxas = codegen.find_ptxas()
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

mlir_opt = os.path.join(mlir_bin, "mlir-opt")
plugin = xla_gpu.plugin_path()
if os.path.exists(mlir_opt) and os.path.exists(plugin):
    config.available_features.add("mlir-opt-plugin")
    config.substitutions.append((
        "%mlir-opt-plugin",
        f"{mlir_opt} --load-dialect-plugin={plugin} --load-pass-plugin={plugin}"))
