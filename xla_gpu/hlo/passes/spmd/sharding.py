"""HloSharding: XLA's `sharding={...}` attribute, parsed and printed, and
the questions the SPMD partitioner asks of it (which chunk of a value a
device holds, the groups of devices that hold the chunks of one dimension).

Forms read (as XLA prints them):

  {replicated}  {maximal device=3}  {manual}  {}  (an empty tuple)
  {devices=[2,1,4]0,1,2,3,4,5,6,7}          explicit tile assignment
  {devices=[2,4]<=[8]}  {devices=[4,2]<=[2,4]T(1,0)}   iota tile assignment
  ... last_tile_dim_replicate                 the last tile dim replicates
  ... last_tile_dims={manual, replicated}     subgroup dims of those kinds
  {{replicated}, {devices=[8,1]<=[8]}}        a tuple's shardings
  `metadata={...}` inside a sharding is skipped.

A tiled sharding's tile assignment has one dimension per value dimension,
then its subgroup dimensions (the replicated / manual ones). Device d holds,
of value dimension i, chunk `coords(d)[i]` of `counts[i]`; a dimension of
size n is cut into chunks of ceil(n / count) (the last ones padded, as XLA
does). Shardy's `#sdy.sharding<@mesh, [{"x"}, {}]>` is read against its mesh
(`from_sdy`) into the same form.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...collectives import iota_replica_groups
from ...module import HloError, HloInstruction

__all__ = ["HloSharding", "ShardingError", "parse_sharding", "sharding_of",
           "parse_sdy_mesh", "parse_sdy_shardings", "open_dims"]


class ShardingError(HloError):
    """A sharding attribute that cannot be read, or one that does not fit
    the value it annotates."""


@dataclass(frozen=True)
class HloSharding:
    kind: str                                   # replicated|maximal|manual|tiled|tuple
    dims: tuple[int, ...] = ()                  # tile assignment dims (tiled)
    devices: tuple[int, ...] = ()               # tile assignment, row major (tiled)
    subgroups: tuple[str, ...] = ()             # kinds of the trailing tile dims
    device: int = -1                            # maximal
    elements: tuple["HloSharding", ...] = ()    # tuple
    _array: np.ndarray | None = field(default=None, compare=False, repr=False, hash=False)

    # ------------------------------------------------------------ makers

    @staticmethod
    def replicated() -> "HloSharding":
        return HloSharding("replicated")

    @staticmethod
    def manual() -> "HloSharding":
        return HloSharding("manual")

    @staticmethod
    def maximal(device: int) -> "HloSharding":
        return HloSharding("maximal", device=int(device))

    @staticmethod
    def tuple_of(elements: Sequence["HloSharding"]) -> "HloSharding":
        return HloSharding("tuple", elements=tuple(elements))

    @staticmethod
    def tiled(assignment, subgroups: Sequence[str] = ()) -> "HloSharding":
        """From a tile assignment array (value dims, then one dim per
        subgroup kind). Trailing replicated subgroup dims of size 1 are
        dropped; a tiling of one tile per dim is `replicated`."""
        array = np.asarray(assignment, dtype=np.int64)
        subgroups = tuple(subgroups)
        # Merge / drop subgroup dims of size 1 (as XLA normalizes them).
        keep = [i for i, kind in enumerate(subgroups)
                if array.shape[array.ndim - len(subgroups) + i] != 1]
        if len(keep) != len(subgroups):
            rank = array.ndim - len(subgroups)
            array = array.reshape(array.shape[:rank] +
                                  tuple(array.shape[rank + i] for i in keep))
            subgroups = tuple(subgroups[i] for i in keep)
        rank = array.ndim - len(subgroups)
        if subgroups == ("manual",) and all(n == 1 for n in array.shape[:rank]):
            return HloSharding.manual()
        if not any(k == "manual" for k in subgroups) and \
                all(n == 1 for n in array.shape[:rank]):
            return HloSharding.replicated()
        return HloSharding("tiled", tuple(int(n) for n in array.shape),
                           tuple(int(d) for d in array.reshape(-1)), subgroups)

    # ------------------------------------------------------------ queries

    @property
    def is_tuple(self) -> bool:
        return self.kind == "tuple"

    @property
    def is_replicated(self) -> bool:
        return self.kind == "replicated"

    @property
    def is_manual(self) -> bool:
        return self.kind == "manual"

    @property
    def is_tiled(self) -> bool:
        return self.kind == "tiled"

    @property
    def has_manual_subgroup(self) -> bool:
        return "manual" in self.subgroups

    def array(self) -> np.ndarray:
        """The tile assignment as an array (tiled shardings)."""
        if self._array is None:
            object.__setattr__(self, "_array",
                               np.array(self.devices, dtype=np.int64).reshape(self.dims))
        return self._array

    @property
    def rank(self) -> int:
        """The value rank the tiling is for (tiled shardings)."""
        return len(self.dims) - len(self.subgroups)

    def counts(self, rank: int) -> tuple[int, ...]:
        """Chunks per value dimension (1 everywhere unless tiled)."""
        if self.kind != "tiled":
            return (1,) * rank
        return self.dims[:self.rank]

    def local_dims(self, dims: Sequence[int]) -> tuple[int, ...]:
        """The shape of one device's chunk of a value of `dims`."""
        if self.kind != "tiled":
            return tuple(dims)
        return tuple(-(-n // c) for n, c in zip(dims, self.counts(len(dims))))

    def is_even_for(self, dims: Sequence[int]) -> bool:
        return all(n % c == 0 for n, c in zip(dims, self.counts(len(dims))))

    def check_fits(self, inst: HloInstruction, shape, devices: int | None = None) -> None:
        """ShardingError naming `inst` when the sharding does not fit its
        shape (rank, tuple arity) or names devices outside 0..devices-1."""
        if self.kind == "tuple":
            if not shape.is_tuple or len(shape.tuple_shapes) != len(self.elements):
                raise ShardingError(f"instruction '{inst.name}': tuple sharding of "
                                    f"{len(self.elements)} elements on shape {shape}")
            for element, sub in zip(self.elements, shape.tuple_shapes):
                element.check_fits(inst, sub, devices)
            return
        if shape.is_tuple and self.kind == "tiled":
            raise ShardingError(f"instruction '{inst.name}': tiled sharding {self} on "
                                f"tuple shape {shape}")
        if self.kind == "tiled" and self.rank != shape.rank:
            raise ShardingError(f"instruction '{inst.name}': sharding {self} tiles "
                                f"{self.rank} dimensions but the shape {shape} has "
                                f"{shape.rank}")
        ids = self.devices if self.kind == "tiled" else \
            ((self.device,) if self.kind == "maximal" else ())
        if devices is not None and any(d < 0 or d >= devices for d in ids):
            raise ShardingError(f"instruction '{inst.name}': sharding {self} names a "
                                f"device outside 0..{devices - 1}")

    # ------------------------------------------------------------ printing

    def __str__(self) -> str:
        return "{" + self._body() + "}"

    def _body(self) -> str:
        if self.kind == "tuple":
            return ", ".join(str(e) for e in self.elements)
        if self.kind in ("replicated", "manual"):
            return self.kind
        if self.kind == "maximal":
            return f"maximal device={self.device}"
        dims = ",".join(str(n) for n in self.dims)
        n = len(self.devices)
        if self.devices == tuple(range(n)):
            text = f"devices=[{dims}]<=[{n}]"
        else:
            text = f"devices=[{dims}]" + ",".join(str(d) for d in self.devices)
        if self.subgroups == ("replicated",):
            text += " last_tile_dim_replicate"
        elif self.subgroups:
            text += " last_tile_dims={" + ", ".join(self.subgroups) + "}"
        return text


# -------------------------------------------------------------- the parser

_IOTA = re.compile(r"<=\[([0-9,\s]*)\](?:T\(([0-9,\s]*)\))?")


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.replace(" ", "").split(",") if t]


class _Reader:
    def __init__(self, text: str, where: str):
        self.text, self.pos, self.where = text, 0, where

    def fail(self, message: str) -> ShardingError:
        return ShardingError(f"{self.where}: bad sharding {self.text!r}: {message}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n,":
            self.pos += 1

    def at(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def expect(self, s: str) -> None:
        if not self.at(s):
            raise self.fail(f"expected '{s}' at offset {self.pos}")
        self.pos += len(s)

    def skip_braced(self) -> None:
        """Skips a `{...}` (metadata), strings and nesting included."""
        depth = 0
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                end = self.text.find('"', self.pos + 1)
                while end != -1 and self.text[end - 1] == "\\":
                    end = self.text.find('"', end + 1)
                if end == -1:
                    raise self.fail("unterminated string")
                self.pos = end + 1
                continue
            self.pos += 1
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return
        raise self.fail("unbalanced braces")

    def sharding(self) -> HloSharding:
        self.skip()
        self.expect("{")
        self.skip()
        if self.at("{") or self.at("}"):      # a tuple's shardings
            elements = []
            while not self.at("}"):
                elements.append(self.sharding())
                self.skip()
            self.expect("}")
            return HloSharding.tuple_of(elements)
        kind = None
        dims: list[int] | None = None
        devices: list[int] | None = None
        subgroups: list[str] = []
        device = None
        while True:
            self.skip()
            if self.at("}"):
                self.pos += 1
                break
            m = re.compile(r"[A-Za-z_]+").match(self.text, self.pos)
            if not m:
                raise self.fail(f"unexpected text at offset {self.pos}")
            word = m.group(0)
            self.pos = m.end()
            if word in ("replicated", "manual", "maximal", "unknown"):
                kind = word
            elif word == "device":
                self.expect("=")
                m = re.compile(r"-?\d+").match(self.text, self.pos)
                if not m:
                    raise self.fail("device= takes a number")
                device, self.pos = int(m.group(0)), m.end()
            elif word == "devices":
                kind = "tiled"
                self.expect("=[")
                end = self.text.find("]", self.pos)
                if end == -1:
                    raise self.fail("unterminated devices=[")
                try:
                    dims = _ints(self.text[self.pos:end])
                except ValueError:
                    raise self.fail("tile dims must be integers") from None
                self.pos = end + 1
                iota = _IOTA.match(self.text, self.pos)
                if iota:
                    self.pos = iota.end()
                    try:
                        reshape = _ints(iota.group(1))
                        perm = _ints(iota.group(2)) if iota.group(2) is not None else None
                    except ValueError:
                        raise self.fail("iota dims must be integers") from None
                    try:   # the iota form replica groups share: one group of all
                        devices = list(iota_replica_groups(1, math.prod(reshape), reshape,
                                                           perm)[0])
                    except HloError as e:
                        raise self.fail(str(e)) from None
                else:
                    m = re.compile(r"\s*-?\d+(\s*,\s*-?\d+)*").match(self.text, self.pos)
                    if not m:
                        raise self.fail("devices=[...] needs a device list or <=[...]")
                    devices = _ints(m.group(0))
                    self.pos = m.end()
            elif word == "last_tile_dim_replicate":
                subgroups = ["replicated"]
            elif word == "last_tile_dims":
                self.expect("=")
                self.skip()
                self.expect("{")
                end = self.text.find("}", self.pos)
                if end == -1:
                    raise self.fail("unterminated last_tile_dims")
                subgroups = [s.strip() for s in self.text[self.pos:end].split(",")
                             if s.strip()]
                self.pos = end + 1
                for s in subgroups:
                    if s not in ("manual", "replicated"):
                        raise self.fail(f"unknown subgroup kind '{s}'")
            elif word == "metadata":
                self.expect("=")
                self.skip_braced()
            elif word in ("shard_as", "shard_like"):
                raise self.fail(f"{word} is not supported")
            else:
                raise self.fail(f"unknown word '{word}'")
        if kind is None:
            raise self.fail("no sharding kind")
        if kind == "unknown":
            raise self.fail("an unknown sharding cannot be partitioned")
        if kind == "maximal":
            if device is None or device < 0:
                raise self.fail("maximal needs device=N (N >= 0)")
            return HloSharding.maximal(device)
        if kind != "tiled":
            return HloSharding(kind)
        if not dims or any(n < 1 for n in dims):
            raise self.fail("tile dims must be positive")
        if len(devices) != math.prod(dims):
            raise self.fail(f"{len(devices)} devices for a tile assignment of "
                            f"{math.prod(dims)}")
        if len(set(devices)) != len(devices) or min(devices) < 0:
            raise self.fail("the tile assignment names a device twice (or a negative one)")
        if len(subgroups) > len(dims):
            raise self.fail("more subgroup dims than tile dims")
        return HloSharding.tiled(np.array(devices).reshape(dims), subgroups)


def parse_sharding(text: str, where: str = "sharding") -> HloSharding:
    """Reads one `{...}` sharding; ShardingError naming `where` if bad."""
    if not isinstance(text, str):
        raise ShardingError(f"{where}: sharding must be text, got {type(text).__name__}")
    reader = _Reader(text.strip(), where)
    out = reader.sharding()
    reader.skip()
    if reader.pos != len(reader.text):
        raise reader.fail(f"trailing text at offset {reader.pos}")
    return out


def sharding_of(inst: HloInstruction, devices: int | None = None) -> HloSharding | None:
    """The instruction's `sharding=` attribute (None without one), checked
    against its shape."""
    raw = inst.attrs.get("sharding")
    if raw is None:
        return None
    where = f"instruction '{inst.name}'"
    if inst.location is not None:
        where = f"line {inst.location.line}: {where}"
    sharding = parse_sharding(raw, where)
    if sharding.kind == "tuple" and len(sharding.elements) == 1 and \
            inst.shape.is_tuple and not inst.shape.tuple_shapes:
        # XLA gives an empty tuple one leaf sharding: the instruction's own.
        sharding = sharding.elements[0]
    sharding.check_fits(inst, inst.shape, devices)
    return sharding


# -------------------------------------------------------------- Shardy's form

_MESH = re.compile(r'(\w+)\s*=\s*#sdy\.mesh<\[([^\]]*)\](?:\s*,\s*device_ids=\[([^\]]*)\])?>')
_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')


def parse_sdy_mesh(module_attrs: dict) -> dict[str, tuple[list[tuple[str, int]], np.ndarray]]:
    """The meshes of a module's `xla.sdy.meshes` frontend attribute: name
    -> (axes [(name, size)], device ids in mesh order)."""
    raw = str(module_attrs.get("frontend_attributes", ""))
    meshes = {}
    for m in _MESH.finditer(raw.replace('\\"', '"')):
        axes = [(a, int(n)) for a, n in _AXIS.findall(m.group(2))]
        total = math.prod(n for _, n in axes)
        ids = np.arange(total) if not m.group(3) else np.array(_ints(m.group(3)))
        meshes[m.group(1)] = (axes, ids)
    return meshes


_SDY_ONE = re.compile(r'<\s*@(\w+)\s*,\s*\[(.*?)\]\s*(?:,\s*replicated=\{[^}]*\})?\s*>')


def _sdy_to_hlo(mesh, dim_specs: list[str], where: str) -> HloSharding:
    axes, ids = mesh
    sizes = {a: n for a, n in axes}
    order = [a for a, _ in axes]
    per_dim: list[list[str]] = []
    for spec in dim_specs:
        spec = spec.strip().strip("{}").replace("?", "").strip()
        names = [s.strip().strip('"') for s in spec.split(",") if s.strip()]
        for name in names:
            if name not in sizes:
                raise ShardingError(f"{where}: Shardy axis '{name}' (sub-axes are not "
                                    "supported) is not in the mesh")
        per_dim.append(names)
    used = [a for names in per_dim for a in names]
    if len(set(used)) != len(used):
        raise ShardingError(f"{where}: a Shardy axis shards two dimensions")
    rest = [a for a in order if a not in used]
    grid = ids.reshape([n for _, n in axes]) if axes else ids.reshape(())
    perm = [order.index(a) for a in used + rest]
    grid = grid.transpose(perm)
    dims = [math.prod(sizes[a] for a in names) for names in per_dim]
    dims.append(math.prod(sizes[a] for a in rest))
    return HloSharding.tiled(grid.reshape(dims), ("replicated",))


def parse_sdy_shardings(text: str, module_attrs: dict, where: str) -> list[HloSharding]:
    """The shardings of a `#sdy.sharding<...>` or `#sdy.sharding_per_value<[...]>`
    frontend attribute, read against the module's meshes."""
    meshes = parse_sdy_mesh(module_attrs)
    text = text.replace('\\"', '"')
    out = []
    for m in _SDY_ONE.finditer(text):
        mesh = meshes.get(m.group(1))
        if mesh is None:
            raise ShardingError(f"{where}: Shardy mesh '@{m.group(1)}' is not in the "
                                "module's xla.sdy.meshes")
        body = m.group(2)
        specs = re.findall(r"\{[^}]*\}", body)
        out.append(_sdy_to_hlo(mesh, specs, where))
    if not out:
        raise ShardingError(f"{where}: cannot read the Shardy sharding {text!r}")
    return out


def open_dims(inst: HloInstruction) -> tuple[int, ...] | None:
    """The dims a sharding constraint leaves open in its Shardy form
    (`{?}`, `{"y", ?}`: propagation may cut them further; jax marks so what
    it leaves to the compiler), None when it leaves none open or states no
    Shardy form. Its HLO form pins those dims as they are."""
    raw = (inst.attrs.get("frontend_attributes") or {}).get("xla.sdy.sharding")
    if not isinstance(raw, str) or "?" not in raw:
        return None
    found = list(_SDY_ONE.finditer(raw.replace('\\"', '"')))
    if len(found) != 1:
        return None
    specs = re.findall(r"\{[^}]*\}", found[0].group(2))
    dims = tuple(i for i, spec in enumerate(specs) if "?" in spec)
    return dims or None
