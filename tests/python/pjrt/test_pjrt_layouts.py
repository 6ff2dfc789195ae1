"""The layouts jax reads back from xla_gpu's executables: row-major unless
asked otherwise (the header jaxlib's converter prints lays a transposed
result out transposed; jax states the layouts it wants on the StableHLO
function), Layout.AUTO left to the compiler, and with_sharding_constraint
with a layout (a LayoutConstraint custom call) on one and several devices."""

from __future__ import annotations

import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")


def test_results_are_row_major_unless_asked_and_layout_constraints_run():
    out = run_jax("""
        from jax.experimental.layout import Format, Layout
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        res = {}
        x = np.arange(32, dtype=np.int32).reshape(4, 4, 2)
        c = jax.jit(lambda v: v.T).lower(x).compile()
        res["default"] = [list(c.input_formats[0][0].layout.major_to_minor),
                          list(c.output_formats.layout.major_to_minor)]
        res["default value"] = bool((np.asarray(c(x)) == x.T).all())
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
        s = NamedSharding(mesh, P("a"))
        arr = jax.device_put(np.arange(16 * 8, dtype=np.int32).reshape(16, 8), s)
        sds = jax.ShapeDtypeStruct(arr.shape, arr.dtype, sharding=s)
        c = jax.jit(lambda v: v.T, in_shardings=Format(Layout.AUTO),
                    out_shardings=Format(Layout.AUTO)).lower(sds).compile()
        res["auto"] = list(c.output_formats.layout.major_to_minor)
        c = jax.jit(lambda v: v.T).lower(sds).compile()
        res["sharded default"] = list(c.output_formats.layout.major_to_minor)
        custom = Layout(major_to_minor=(0, 1))

        @jax.jit
        def constrained(v):
            return jax.lax.with_sharding_constraint(v.T * 2, Format(custom, s))

        got = constrained(arr)
        res["constrained"] = [bool((np.asarray(got) == 2 * np.asarray(arr).T).all()),
                              str(got.sharding.spec)]
        print(json.dumps(res))
    """, platforms="xla_gpu", extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    assert out["default"] == [[0, 1, 2], [0, 1, 2]], out
    assert out["default value"] is True
    assert out["auto"] == [1, 0], out          # the transpose as a relabelling
    assert out["sharded default"] == [0, 1], out
    assert out["constrained"][0] is True, out
    assert out["constrained"][1] in ("P('a',)", "PartitionSpec('a',)"), out
