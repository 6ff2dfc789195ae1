"""RenameFusions, as XLA:GPU names its fusions at the end of the pipeline:
`loop_<heroes>_fusion` / `input_<heroes>_fusion` (the sorted opcodes of the
roots' heroes), their computations `fused_<heroes>`, parameters
`param_<number>`. Fusions wrapped around
one instruction keep their `wrapped_<op>` names."""

from __future__ import annotations

from ..module import HloModule
from .fusion_utils import body_acceptable, fusion_kind_for, hero_names
from .pipeline import HloPass
from .util import program_computations

__all__ = ["RenameFusions"]


class RenameFusions(HloPass):
    name = "rename-fusions"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp in program_computations(module):
            for inst in comp.instructions:
                if inst.opcode != "fusion":
                    continue
                body = inst.attrs["calls"]
                kind = str(inst.attrs.get("kind", "kLoop"))
                if kind not in ("kLoop", "kInput"):
                    continue
                for param in body.parameters:
                    if _base(param.name) != f"param_{param.parameter_number}":
                        body.rename(param, module.unique_name(f"param_{param.parameter_number}"))
                new_kind = fusion_kind_for(body_acceptable(body))
                if new_kind != kind:
                    inst.attrs["kind"] = new_kind
                    changed = True
                if inst.name.startswith("wrapped_"):
                    continue
                heroes = hero_names(body)
                prefix = "input" if new_kind == "kInput" else "loop"
                wanted = f"{prefix}_{heroes}_fusion"
                if _base(inst.name) != wanted:
                    comp.rename(inst, module.unique_name(wanted))
                    changed = True
                if _base(body.name) != f"fused_{heroes}":
                    if module._computation_names is not None:
                        module._computation_names.release(body.name)
                    body.name = module.unique_computation_name(f"fused_{heroes}")
                    changed = True
        return changed


def _base(name: str) -> str:
    root, dot, digits = name.rpartition(".")
    return root if dot and digits.isdigit() else name
