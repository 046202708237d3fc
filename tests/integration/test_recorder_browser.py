"""A real browser opens a bundle: headless Chromium plays every video and draws the reward plots.

Chromium (Debian ``chromium``, installed by ``.ci/run``) loads the bundle from ``file://``
with ``--dump-dom``: a probe page in the bundle loads each MP4 and writes what the
browser decoded (size, duration) into the DOM, and ``index.html`` must come out with one
reward polyline per recorded episode (drawn by its inline script, no network).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require, require_tool
from rlmesh.recorder import Recorder

pytestmark = pytest.mark.e2e

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--allow-file-access-from-files",
    "--virtual-time-budget=8000",
    "--dump-dom",
]


class Dot:
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self) -> None:
        from rlmesh.spaces import Box

        self.observation_space = Box(-1.0, 1.0, (2,), "float32")
        self.action_space = Box(-1.0, 1.0, (2,), "float32")
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return (
            np.zeros(2, np.float32),
            0.1 * self.t,
            self.t >= 12,
            False,
            {"is_success": self.t >= 12},
        )

    def render(self) -> np.ndarray:
        img = np.full((72, 96, 3), 40, np.uint8)
        img[30:42, 6 * self.t : 6 * self.t + 12] = (230, 90, 60)
        return img


def dump_dom(chromium: str, page: Path) -> str:
    out = subprocess.run(
        [chromium, *FLAGS, page.as_uri()], capture_output=True, text=True, timeout=90
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


PROBE = """<!doctype html><html><body><ol id="out"></ol><script>
var paths = %s, out = document.getElementById("out");
paths.forEach(function (p) {
  var v = document.createElement("video"), li = document.createElement("li");
  v.muted = true; li.textContent = "pending " + p; out.appendChild(li);
  v.addEventListener("loadeddata", function () { li.textContent = "loaded " + v.videoWidth + "x" + v.videoHeight + " " + v.duration.toFixed(2) + " " + p; });
  v.addEventListener("error", function () { li.textContent = "error " + (v.error && v.error.code) + " " + p; });
  v.src = p;
});
</script></body></html>"""


@pytest.mark.parametrize("codec", ["av1", "h264"])
def test_chromium_plays_every_video_of_a_bundle_and_draws_its_reward_plots(
    tmp_path: Path, codec: str
) -> None:
    require("av", "video recording")
    chromium = require_tool("chromium", "the browser test")
    with Recorder(fps=12, codec=codec) as rec:
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE, Dot(), seeds=[0, 1], hooks=rec.capture(model="pi", env="Dot-v0")
        )
        bundle = rec.export(tmp_path / "bundle")
    doc = json.loads((bundle / "result.json").read_text())
    paths = [m["path"] for e in doc["workloads"][0]["episodes"] for m in e["media"]]
    (bundle / "probe.html").write_text(PROBE % json.dumps(paths))
    dom = dump_dom(chromium, bundle / "probe.html")
    results = re.findall(r"<li>([^<]*)</li>", dom)
    assert results == [
        f"loaded 96x72 1.08 {p}" for p in paths
    ]  # the reset frame + 12 steps at 12 fps
    page = dump_dom(chromium, bundle / "index.html")
    assert page.count("<polyline") == 2 and page.count("<video") == 2
