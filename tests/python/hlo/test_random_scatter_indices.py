"""Random scatter indices keep the scatter's promises (unique, sorted), as
XLA's harness makes them: a GPU kernel that trusts unique_indices writes
without atomics, so repeated indices would give no one right answer."""

from string import Template

import numpy as np
import pytest

from xla_gpu import hlo
from xla_gpu.hlo.numerics import random_inputs

SCATTER = Template("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[$operand] parameter(0)
  i = s32[$indices] parameter(1)
  u = f32[$updates] parameter(2)
  ROOT s = f32[$operand] scatter(x, i, u), update_window_dims={$window},
      inserted_window_dims={$inserted}, scatter_dims_to_operand_dims={$to_operand},
      index_vector_dim=$vector_dim, $flags to_apply=add
}
""")


def _scatter(operand, indices, updates, window, inserted, to_operand, vector_dim, flags):
    return hlo.parse_module(SCATTER.substitute(
        operand=operand, indices=indices, updates=updates, window=window,
        inserted=inserted, to_operand=to_operand, vector_dim=vector_dim, flags=flags))


@pytest.mark.parametrize("seed", range(5))
def test_unique_indices_are_distinct_and_in_range(seed):
    # 6 rows of a [10,4] operand: the old bound (the smallest operand
    # dimension, 4) could not hold 6 distinct starts.
    comp = _scatter("10,4", "6,1", "6,4", "1", "0", "0", "1", "unique_indices=true,")
    indices = random_inputs(comp.entry, seed)[1]
    assert indices.shape == (6, 1)
    assert np.unique(indices).size == 6
    assert indices.min() >= 0 and indices.max() <= 9


def test_unique_index_vectors_along_a_leading_vector_dimension():
    # Index vectors of length 2 along dimension 0; windows [2,3] of an
    # [8,9] operand start at most at (6, 6).
    comp = _scatter("8,9", "2,20", "20,2,3", "1,2", "", "0,1", "0", "unique_indices=true,")
    indices = random_inputs(comp.entry, 3)[1]
    vectors = {tuple(v) for v in indices.T}
    assert len(vectors) == 20
    assert indices[0].max() <= 6 and indices[1].max() <= 6 and indices.min() >= 0


def test_sorted_indices_are_in_order():
    comp = _scatter("50,4", "30", "30,4", "1", "0", "0", "1",
                    "indices_are_sorted=true, unique_indices=true,")
    indices = random_inputs(comp.entry, 0)[1]
    assert np.all(np.diff(indices) > 0)


def test_more_updates_than_starts_still_gives_valid_indices():
    comp = _scatter("3,4", "7,1", "7,4", "1", "0", "0", "1", "unique_indices=true,")
    indices = random_inputs(comp.entry, 0)[1]
    assert indices.min() >= 0 and indices.max() <= 2


def test_each_row_is_written_once():
    # With unique indices a scatter-add is a plain read-add-write per row:
    # numpy's fancy assignment (last write wins) then agrees with it.
    comp = _scatter("10,4", "6,1", "6,4", "1", "0", "0", "1", "unique_indices=true,")
    x, i, u = random_inputs(comp.entry, 2)
    expected = x.copy()
    expected[i[:, 0]] = x[i[:, 0]] + u
    (got,) = hlo.evaluate(comp, x, i, u)
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_unique_vectors_in_a_space_too_large_to_list():
    # 3-long vectors into a [300,300,300] operand: 2.7e7 starts, drawn.
    comp = _scatter("300,300,300", "50,3", "50", "", "0,1,2", "0,1,2", "1",
                    "unique_indices=true,")
    indices = random_inputs(comp.entry, 4)[1]
    assert indices.shape == (50, 3) and len({tuple(v) for v in indices}) == 50
    assert indices.min() >= 0 and indices.max() <= 299
