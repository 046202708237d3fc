"""``progress=`` with ``workers=``: the run's keyword decides, ``Workers(progress=...)`` is the default (issue 39 item 1).

``rlmesh.run(..., workers=Workers(progress=False), progress=True)`` draws the line: the
keyword of the call is more specific than the configuration of the workers (often a warm
pool shared by many runs), as httpx's per-request timeout wins over the client's.
``progress=None`` (the default) leaves it to ``Workers(progress=...)``, whose own
``None`` means "when stderr is a terminal".
"""

from __future__ import annotations

import pytest

from conftest import require

require("gymnasium")

import rlmesh  # noqa: E402


def _shown(capsys: pytest.CaptureFixture[str], **kw: object) -> bool:
    capsys.readouterr()
    result = rlmesh.run(rlmesh.RANDOM_SAMPLE, "CartPole-v1", seeds=[0, 1], **kw)  # type: ignore[arg-type]
    assert result.num_episodes == 2
    err = capsys.readouterr().err
    if "episodes " not in err:
        return False
    final = [line for line in err.splitlines() if line.startswith("episodes ")][-1]
    assert final.startswith("episodes 2/2 | ") and final.endswith("| workers 1/1")
    return True


def test_the_run_keyword_decides_and_workers_progress_is_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with rlmesh.Workers(n=1, backend="processes", progress=False).start() as quiet_pool:
        assert _shown(capsys, workers=quiet_pool, progress=True)
        assert not _shown(capsys, workers=quiet_pool)
    with rlmesh.Workers(n=1, backend="processes", progress=True).start() as loud_pool:
        assert not _shown(capsys, workers=loud_pool, progress=False)
        assert _shown(capsys, workers=loud_pool)
    # Workers(progress=None) and run(progress=None): stderr is no terminal here, so no line
    assert not _shown(capsys, workers=rlmesh.Workers(n=1, backend="processes"))
