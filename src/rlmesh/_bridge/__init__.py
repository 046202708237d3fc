"""Value bridges: canonical trees <-> what each flavour of the API hands to users (BKD-30/31).

The wire codec and the space encoders speak *canonical trees* (see
``rlmesh.spaces._values``): ndarray leaves for Box/MultiBinary/MultiDiscrete,
``int``/``str`` for one Discrete/Text value, a 1-D ndarray/``list[str]`` for a
batch of them, ``dict``/``tuple`` containers. A bridge maps those trees to user
values and back:

=========  ==================================  ===============================
bridge     ndarray leaf becomes                batched Discrete becomes
=========  ==================================  ===============================
``plain``  ``rlmesh.Tensor`` (zero-copy view)  ``list[int]`` (VAL-2/VAL-3)
``numpy``  the ndarray itself (writable)       the int ndarray (OPP-20)
``torch``  ``torch.Tensor`` (shares memory)    an int tensor
``jax``    ``jax.Array``                       an int array
=========  ==================================  ===============================

There is one bridge per flavour, and every path converts through it: clients,
framework serving (``serve/_framework.py``) and the model flavours, whose own
rules (fusion, de-chunking) are functions over it in ``rlmesh.models._values``.

The package: ``_base`` (the shared rules, the plain and numpy bridges, the numpy
helpers), ``_torch``, ``_jax`` (with ``_jax_probe``, the one module touching jax's
private API) and ``_registry`` (the singletons and their names). Neither torch nor
jax is imported until its bridge is used.

``decode(tree)`` walks any tree; ``compile_decoder(spec, lanes=)`` builds a
per-spec function for the hot path (it alone knows which arrays are batched
Discrete values). ``encode(value)`` turns framework leaves into something
:func:`rlmesh.spaces._values.compile_encoder` accepts. ``tree_stack`` /
``tree_unstack`` fuse and split per-lane trees (BKD-31); the plain bridge cannot
fuse and passes per-lane lists through.

>>> import numpy as np
>>> NUMPY.tree_stack([{"a": np.zeros(2), "t": "x"}, {"a": np.ones(2), "t": "y"}])
{'a': array([[0., 0.],
       [1., 1.]]), 't': ['x', 'y']}
>>> PLAIN.decode({"a": np.zeros(2, np.float32)})
{'a': Tensor(dtype='float32', shape=[2], bytes=8)}
"""

from __future__ import annotations

from ._base import (
    Bridge as Bridge,
    _identity as _identity,
    asarray as asarray,
    from_array as from_array,
)
from ._jax import (
    JAX_SHARE_MIN_BYTES as JAX_SHARE_MIN_BYTES,
    _is_jax as _is_jax,
    _is_jax as is_jax,
    jax_asarray as jax_asarray,
    jax_from_array as jax_from_array,
    jax_wrap_fresh as jax_wrap_fresh,
)
from ._registry import (
    JAX as JAX,
    NUMPY as NUMPY,
    PLAIN as PLAIN,
    TORCH as TORCH,
    resolve_bridge as resolve_bridge,
)
from ._torch import (
    _is_torch as _is_torch,
    _is_torch as is_torch,
    torch_as_tensor as torch_as_tensor,
    torch_from_tensor as torch_from_tensor,
)

__all__ = [
    "JAX",
    "NUMPY",
    "PLAIN",
    "TORCH",
    "Bridge",
    "asarray",
    "from_array",
    "is_jax",
    "is_torch",
    "jax_asarray",
    "jax_from_array",
    "resolve_bridge",
    "torch_as_tensor",
    "torch_from_tensor",
]
