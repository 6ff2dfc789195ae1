"""The module's name table (`NameUniquer`) and the shape texts the printer
remembers: a table numbers as its definition says, a fusion pass that adds
bodies whose names it took from the table (and reserves none again)
leaves the table as a fresh build would, and a shape's remembered text is
its text."""

from __future__ import annotations

from xla_gpu.hlo import parse_module
from xla_gpu.hlo.module import NameUniquer
from xla_gpu.hlo.passes.fusion_utils import create_fusion, fuse_producer
from xla_gpu.hlo.printer import shape_to_text
from xla_gpu.hlo.shape import Shape

# Names with and without numeric suffixes, and some that only look like
# they have one (no root, an empty suffix, a non-ASCII digit, leading zeros).
NAMES = ["add", "add.3", "add.11", "mul.07", "x.y.4", "x.y", ".5", "a.", "b.\u0663",
         "fusion", "fusion.2", "param_0.9", "c.0"]
BASES = ["add", "add.3", "add.1", "mul", "mul.7", "x.y", "x.y.4", "x", ".5", "", "a.", "a",
         "b.\u0663", "b", "fusion", "fusion.2", "param_0", "param_0.9", "c", "c.0", "new"]


def _by_definition(names: list[str], bases: list[str]) -> list[str]:
    """XLA's NameUniquer over `names`, asked for each base in turn: a free
    base is taken as it is; a taken one gets its root and the next number
    after the largest suffix of that root in use."""
    used = set(names)
    result = []
    for base in bases:
        base = base or "instruction"
        root, dot, digits = base.rpartition(".")
        numbered = bool(dot and root and digits.isdigit() and digits.isascii())
        if base in used:
            if not numbered:
                root = base
            suffixes = [int(n.rpartition(".")[2]) for n in used
                        if n.rpartition(".")[0] == root and n.rpartition(".")[2].isdigit()
                        and n.rpartition(".")[2].isascii()]
            k = max([0, *suffixes]) + 1
            while f"{root}.{k}" in used:
                k += 1
            base = f"{root}.{k}"
        used.add(base)
        result.append(base)
    return result


def test_a_rebuilt_table_numbers_as_its_definition():
    NameUniquer(NAMES)
    table = NameUniquer(NAMES)
    assert [table.get(b) for b in BASES] == _by_definition(NAMES, BASES)


MODULE = """
HloModule m

ENTRY e {
  p0 = f32[8]{0} parameter(0)
  c = f32[] constant(2)
  b = f32[8]{0} broadcast(c), dimensions={}
  add.7 = f32[8]{0} add(p0, b)
  ROOT exp = f32[8]{0} exponential(add.7)
}
"""


def test_fusion_bodies_leave_the_table_as_a_fresh_build():
    module = parse_module(MODULE).link()
    entry = module.entry
    fusion = create_fusion(entry.find("exp"))
    fuse_producer(fusion, entry.find("add.7"))   # its clone named by the table
    create_fusion(entry.find("b"))
    kept = module._instruction_names()
    module._names = None
    fresh = module._instruction_names()
    assert kept.used == fresh.used
    assert kept.next_id == fresh.next_id
    body = fusion.attrs["calls"]
    names = {inst.name for inst in body.instructions}
    assert "add.8" in names and names <= fresh.used
    assert [i.opcode for i in body.instructions if i.name == "add.8"] == ["add"]


def test_a_remembered_shape_text_is_the_text():
    array = Shape("f32", (4, 16), (0, 1))
    assert shape_to_text(array) == "f32[4,16]{0,1}"
    assert shape_to_text(array) == "f32[4,16]{0,1}"
    assert shape_to_text(array, layout=False) == "f32[4,16]"
    pair = Shape("", (), None, (array, Shape("s32", ())))
    assert shape_to_text(pair) == "(f32[4,16]{0,1}, s32[])"
    # dims given as a list can change: such a shape is never remembered
    loose = Shape("f32", [2, 3])
    assert shape_to_text(loose) == "f32[2,3]{1,0}"
    loose.dims.append(5)
    assert shape_to_text(loose) == "f32[2,3,5]{2,1,0}"
