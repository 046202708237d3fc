"""``rlmesh.run`` / ``rlmesh.session`` turn their keywords into one value each (issue 34)."""

from __future__ import annotations

import inspect
from dataclasses import fields

import rlmesh
from rlmesh.eval._options import RunOptions, SessionKeywords, SessionOptions


def _keywords(fn: object) -> set[str]:
    params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    return {p.name for p in params if p.kind is p.KEYWORD_ONLY}


def test_every_run_keyword_lands_in_the_options_value() -> None:
    """A keyword added to ``run`` but not to the options would be dropped silently."""
    run_fields = {f.name for f in fields(RunOptions)} - {"session"}
    assert _keywords(rlmesh.run) == run_fields | {f.name for f in fields(SessionOptions)}
    assert _keywords(rlmesh.session) == set(SessionKeywords.__annotations__)


def test_the_options_of_a_call_are_the_keywords_as_given() -> None:
    given = {
        "model": object(),
        "env": "CartPole-v1",
        "seeds": [4, 5],
        "max_episode_steps": 7,
        "close_env": True,
        "execution_horizon": 2,
        "prefetch_lead": 1,
    }
    opts = RunOptions.of(given)
    assert (opts.seeds, opts.max_episode_steps, opts.workers) == ([4, 5], 7, None)
    assert opts.session == SessionOptions(close_env=True, execution_horizon=2, prefetch_lead=1)
