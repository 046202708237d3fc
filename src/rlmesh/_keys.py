"""Metadata key names, defined once (issue 10).

Env metadata and contract fields that several layers read or write: the
Gymnasium keys an env declares, and the namespaced ``rlmesh.*`` keys that carry
adapter tags, the env branch, reset options, parameter bindings and
conformance warnings.
"""

from __future__ import annotations

__all__ = [
    "AUTORESET_MODE_KEY",
    "CONFORMANCE_WARNING_KEY",
    "DESCRIBE_METADATA_KEY",
    "ENV_BRANCH_KEY",
    "ENV_RESET_OPTIONS_KEY",
    "ENV_TAGS_KEY",
    "MAX_EPISODE_STEPS_KEY",
    "MODEL_SPEC_KEY",
    "PARAM_BINDING_KEY",
]

#: Gymnasium: a vector env's autoreset mode (AR-1).
AUTORESET_MODE_KEY = "autoreset_mode"
#: The episode step limit published from ``env.spec.max_episode_steps``.
MAX_EPISODE_STEPS_KEY = "max_episode_steps"
#: Adapter tags an env declares (observation roles, frame sources ...).
ENV_TAGS_KEY = "rlmesh.adapters.v1.env_tags"
#: The env branch a model spec was matched against.
ENV_BRANCH_KEY = "rlmesh.adapters.v1.env_branch"
#: A model's adapter spec.
MODEL_SPEC_KEY = "rlmesh.adapters.v1.model_spec"
#: Reset options an env accepts (e.g. ``trial_index``).
ENV_RESET_OPTIONS_KEY = "rlmesh.env.v1.reset_options"
#: A factory's parameter binding.
PARAM_BINDING_KEY = "rlmesh.params.v1.binding"
#: The describe document of a factory or model.
DESCRIBE_METADATA_KEY = "rlmesh.describe.v1"
#: Conformance warnings an endpoint attaches to an info dict (INFO-4).
CONFORMANCE_WARNING_KEY = "rlmesh.conformance.warning"
