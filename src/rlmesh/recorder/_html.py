"""``index.html``: a static, self-contained page to browse a bundle (no network resources).

One section per workload (its metrics and an episode table); per episode with media,
each video next to a plot of the cumulative reward over steps (from ``steps.jsonl``)
with a cursor that follows the video (``step = currentTime * fps``). The data rides in
the page as JSON; videos load by relative path, so the page works from a folder
(``file://``) or any static host. A zip must be unpacked first.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["build_index", "reward_series"]

#: Points kept per reward plot (longer episodes are subsampled).
MAX_POINTS = 600


def reward_series(step_log: str) -> list[list[float]]:
    """``[[step, cumulative_reward], ...]`` from a ``steps.jsonl`` text, subsampled to ``MAX_POINTS``.

    >>> reward_series('{"step":0,"reward":1.0}\\n{"step":1,"reward":0.5}\\n')
    [[0, 1.0], [1, 1.5]]
    """
    points: list[list[float]] = []
    total = 0.0
    for line in step_log.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            total += float(row.get("reward") or 0.0)
            points.append([row["step"], total])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    if len(points) > MAX_POINTS:
        stride = len(points) / MAX_POINTS
        keep = [points[int(i * stride)] for i in range(MAX_POINTS)]
        keep[-1] = points[-1]
        points = keep
    return points


def _outcome(ep: Mapping[str, Any]) -> str:
    if ep.get("success") is True:
        return "success"
    if ep.get("success") is False:
        return "failure"
    return "done" if ep.get("terminated") else "timeout"


def _fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "&ndash;"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return html.escape(str(x))


def _video(v: Mapping[str, Any], plot_id: str) -> str:
    esc = html.escape
    src = esc(str(v["path"]), quote=True)
    size = f" &middot; {v['width']}x{v['height']}" if v.get("width") else ""
    count = f" &middot; {v['frameCount']} frames" if v.get("frameCount") is not None else ""
    fps = esc(str(v.get("fps") or ""), quote=True)
    return (
        f'<figure><video controls preload="metadata" src="{src}" data-fps="{fps}" data-plot="{plot_id}"></video>'
        f'<figcaption>{esc(str(v.get("camera")))}{size}{count} &middot; <a href="{src}">file</a></figcaption></figure>'
    )


def build_index(document: Mapping[str, Any], read_text: Callable[[str], str | None]) -> str:
    """The page for ``document``; ``read_text(rel)`` returns a bundle file's text or ``None``."""
    esc = html.escape
    plots: dict[str, Any] = {}
    parts: list[str] = []
    for wi, w in enumerate(document.get("workloads") or ()):
        m = w.get("metrics") or {}
        rate = m.get("successRate")
        parts.append(
            f"<section><h2>{esc(str(w.get('model')))} &middot; {esc(str(w.get('task')))}</h2>"
            f'<p class="meta">env {esc(str(w.get("env")))} &middot; {w.get("numEpisodes", 0)} episodes &middot; '
            f"mean reward {_fmt(m.get('meanReward'))} &middot; success rate "
            f"{'&ndash;' if rate is None else f'{100 * rate:.1f}%'} &middot; {m.get('totalSteps', 0)} steps</p>"
        )
        if w.get("config"):
            parts.append(
                f'<pre class="cfg">{esc(json.dumps(w["config"], indent=1, default=str))}</pre>'
            )
        rows = []
        details = []
        for ep in w.get("episodes") or ():
            anchor = f"w{wi}e{ep.get('index')}"
            media = ep.get("media") or []
            outcome = _outcome(ep)
            link = f'<a href="#{anchor}">{len(media)} video(s)</a>' if media else ""
            rows.append(
                f"<tr><td>{ep.get('index')}</td><td>{_fmt(ep.get('seed'))}</td><td>{ep.get('steps')}</td>"
                f'<td>{_fmt(ep.get("reward"))}</td><td class="{outcome}">{outcome}</td>'
                f"<td>{_fmt(ep.get('durationS'), 2)}</td><td>{'' if ep.get('includedInMetrics', True) else 'excluded'}</td>"
                f"<td>{link}</td></tr>"
            )
            if not media and not ep.get("stepLog"):
                continue
            plot_id = ""
            if ep.get("stepLog"):
                text = read_text(str(ep["stepLog"]))
                if text:
                    plot_id = anchor
                    plots[anchor] = reward_series(text)
            vids = "".join(_video(v, plot_id) for v in media)
            plot = (
                f'<svg class="plot" id="plot-{plot_id}" viewBox="0 0 400 160"></svg>'
                if plot_id
                else ""
            )
            log = (
                f' &middot; <a href="{esc(str(ep["stepLog"]), quote=True)}">steps.jsonl</a>'
                if ep.get("stepLog")
                else ""
            )
            details.append(
                f'<div class="ep" id="{anchor}"><h3>episode {ep.get("index")} &middot; seed {_fmt(ep.get("seed"))} '
                f'&middot; <span class="{outcome}">{outcome}</span> &middot; reward {_fmt(ep.get("reward"))}{log}</h3>'
                f'<div class="row">{vids}{plot}</div></div>'
            )
        parts.append(
            "<table><thead><tr><th>#</th><th>seed</th><th>steps</th><th>reward</th><th>outcome</th>"
            "<th>seconds</th><th>metrics</th><th>media</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
            + "".join(details)
            + "</section>"
        )
    data = json.dumps(plots, separators=(",", ":")).replace("<", "\\u003c")
    title = esc(f"rlmesh results {document.get('resultSetId', '')}")
    return _PAGE.format(
        title=title,
        header=title,
        recorded=esc(str(document.get("recordedAt", ""))),
        body="".join(parts) or "<p>No workloads.</p>",
        data=data,
    )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{{font:14px/1.4 system-ui,sans-serif;margin:1.5em;background:#111;color:#ddd}}
h1{{font-size:1.3em}} h2{{font-size:1.15em;margin-top:2em}} h3{{font-size:1em;font-weight:500}}
a{{color:#8cf}} .meta{{color:#aaa}} pre.cfg{{background:#1b1b1b;padding:.5em;max-height:10em;overflow:auto}}
table{{border-collapse:collapse}} td,th{{padding:.2em .8em;border-bottom:1px solid #333;text-align:right}}
.success{{color:#6d6}} .failure{{color:#e66}} .timeout,.done{{color:#db6}}
.row{{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}} figure{{margin:0}}
video{{width:256px;max-height:320px;background:#000;display:block;image-rendering:pixelated}} figcaption{{color:#aaa;font-size:.9em}}
svg.plot{{width:400px;height:160px;background:#1b1b1b}} .ep{{border-top:1px solid #222;margin-top:1em}}
</style></head><body>
<h1>{header}</h1><p class="meta">recorded {recorded}</p>
{body}
<script id="plots" type="application/json">{data}</script>
<script>
(function(){{
  var plots = JSON.parse(document.getElementById("plots").textContent);
  var NS = "http://www.w3.org/2000/svg";
  function el(tag, attrs){{ var e = document.createElementNS(NS, tag); for (var k in attrs) e.setAttribute(k, attrs[k]); return e; }}
  Object.keys(plots).forEach(function(id){{
    var pts = plots[id], svg = document.getElementById("plot-" + id);
    if (!svg || !pts.length) return;
    var x0 = pts[0][0], x1 = Math.max(pts[pts.length-1][0], x0 + 1);
    var ys = pts.map(function(p){{ return p[1]; }});
    var y0 = Math.min(0, Math.min.apply(null, ys)), y1 = Math.max.apply(null, ys); if (y1 <= y0) y1 = y0 + 1;
    function X(s){{ return 30 + 360 * (s - x0) / (x1 - x0); }}
    function Y(v){{ return 145 - 130 * (v - y0) / (y1 - y0); }}
    svg.appendChild(el("line", {{x1:30, y1:Y(0), x2:390, y2:Y(0), stroke:"#444"}}));
    svg.appendChild(el("polyline", {{points: pts.map(function(p){{ return X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1); }}).join(" "), fill:"none", stroke:"#8cf", "stroke-width":1.5}}));
    var label = el("text", {{x:32, y:14, fill:"#aaa", "font-size":11}}); label.textContent = "cumulative reward, final " + pts[pts.length-1][1].toFixed(2); svg.appendChild(label);
    var cursor = el("line", {{x1:30, y1:10, x2:30, y2:150, stroke:"#e66", visibility:"hidden"}}); svg.appendChild(cursor);
    document.querySelectorAll('video[data-plot="' + id + '"]').forEach(function(v){{
      var fps = parseFloat(v.dataset.fps) || 30;
      v.addEventListener("timeupdate", function(){{
        var x = X(Math.min(x1, x0 + v.currentTime * fps));
        cursor.setAttribute("x1", x); cursor.setAttribute("x2", x); cursor.setAttribute("visibility", "visible");
      }});
    }});
  }});
}})();
</script>
</body></html>
"""
