"""Indexing an rlmesh.Tensor points to the flavours with array values (issue 12 surprises)."""

from __future__ import annotations

import numpy as np
import pytest

import rlmesh
import rlmesh.numpy as rnp


def test_indexing_a_tensor_raises_a_type_error_naming_the_array_flavours() -> None:
    t = rnp.from_array(np.arange(4, dtype=np.float32))
    assert isinstance(t, rlmesh.Tensor)
    with pytest.raises(TypeError, match=r"rlmesh\.numpy.*rlmesh\.gymnasium"):
        t[0]
    with pytest.raises(TypeError, match="not iterable"):
        list(t)
    assert rnp.asarray(t)[1] == 1.0  # the pointed-to conversion works
