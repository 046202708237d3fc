"""Models: the prediction corners, lifecycle hooks and per-episode context (MOD, DELTA-28..36).

``Model`` is the dependency-free flavour (``rlmesh.Model``), ``NumpyModel`` the
numpy one (``rlmesh.numpy.Model``); both share :class:`ModelBase`.
"""

from ._base import Model as Model, ModelBase as ModelBase
from ._context import PredictContext as PredictContext, predict_seed as predict_seed
from ._numpy import NumpyModel as NumpyModel

__all__ = ["Model", "ModelBase", "NumpyModel", "PredictContext", "predict_seed"]
