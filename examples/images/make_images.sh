#!/bin/sh
# Remakes the README's pictures of examples/mlp_train_step.hlo from a fresh
# compile and run on the cpu target. Needs Graphviz (dot), librsvg
# (rsvg-convert) and pngquant: `apt-get install graphviz librsvg2-bin pngquant`.
set -eu
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
xla-gpu-run examples/mlp_train_step.hlo --target cpu --no-cache --quiet \
    --profile "$out/trace.json" --dump-dir "$out/d"
python - "$out" <<'PY'
import json, re, sys
from pathlib import Path
from xla_gpu.runtime.trace_picture import trace_svg
out = Path(sys.argv[1])
trace = json.loads((out / "trace.json").read_text())
(out / "compile.svg").write_text(trace_svg(trace, width=1000, processes={1}))
(out / "run.svg").write_text(trace_svg(trace, width=1000, processes={2}))
page = (out / "d" / "memory-usage.html").read_text()
(out / "memory.svg").write_text(re.search(r"<svg.*?</svg>", page, re.S).group(0))
PY
dot -Tpng -Gdpi=36 "$out/d/after_optimizations.dot" -o "$out/graph.png"
rsvg-convert "$out/compile.svg" -o "$out/profile_compile.png"
rsvg-convert "$out/run.svg" -o "$out/profile_run.png"
rsvg-convert -w 800 "$out/memory.svg" -o "$out/memory.png"
for name in graph profile_compile profile_run memory; do
    pngquant --force --quality=40-80 --output "examples/images/$name.png" "$out/$name.png"
done
ls -l examples/images/*.png
