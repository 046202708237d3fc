"""The viewer page (VIEW-17, pushed instead of polled): one WebSocket, a camera grid, the run's statistics."""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>rlmesh view</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
:root { color-scheme: dark; }
body { margin: 0; background: #111418; color: #d8dde3; font: 14px/1.4 system-ui, sans-serif; }
header { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; padding: 8px 12px; background: #1a1f26; }
button { background: #262d36; color: #d8dde3; border: 1px solid #3a434f; border-radius: 4px; padding: 4px 10px; cursor: pointer; }
button.sel { background: #2f6feb; border-color: #2f6feb; color: white; }
button.warn { border-color: #a33; }
#hud { font-family: ui-monospace, monospace; padding: 6px 12px; background: #161a20; white-space: pre-wrap; }
main { display: grid; grid-template-columns: minmax(0, 3fr) minmax(280px, 1fr); gap: 12px; padding: 12px; }
#stage { background: #000; display: flex; align-items: center; justify-content: center; height: 72vh; min-height: 240px; overflow: hidden; }
#main { display: block; }
#grid { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 8px; }
#grid figure { margin: 0; cursor: pointer; border: 2px solid transparent; }
#grid figure.sel { border-color: #2f6feb; }
#grid img { height: 72px; display: block; background: #000; image-rendering: pixelated; }
#grid figcaption { font-size: 11px; text-align: center; }
aside section { background: #1a1f26; border-radius: 6px; padding: 8px; margin-bottom: 10px; }
h3 { margin: 0 0 6px; font-size: 13px; color: #9aa5b1; font-weight: 600; }
table { width: 100%; border-collapse: collapse; font-size: 12px; font-family: ui-monospace, monospace; }
td, th { padding: 2px 4px; text-align: right; } th { color: #9aa5b1; }
tr.ok td:last-child { color: #5fd35f; } tr.bad td:last-child { color: #f06a6a; }
.plot svg { width: 100%; height: auto; display: block; background: #111418; }
#tablewrap { max-height: 260px; overflow: auto; }
#status { margin-left: auto; color: #9aa5b1; }
</style></head>
<body>
<header>
  <span id="sources"></span>
  <span id="lanes"></span>
  <button id="pause" title="pause / resume (p)">pause</button>
  <button id="step" title="single step (.)">step</button>
  <button id="skip" class="warn" title="end this episode (n)">end episode</button>
  <button id="quit" class="warn" title="stop the run (q)">quit</button>
  <span id="status">connecting…</span>
</header>
<div id="hud">waiting for the run…</div>
<main>
  <div>
    <div id="stage"><img id="main" alt="selected camera"></div>
    <div id="grid"></div>
  </div>
  <aside>
    <section><h3>success</h3><div id="rate">-</div></section>
    <section><h3>reward (this episode<span class="lane-note"></span>)</h3><div id="reward" class="plot"></div></section>
    <section><h3>action<span class="lane-note"></span></h3><div id="action" class="plot"></div></section>
    <section><h3>episodes</h3><div id="tablewrap"><table id="eps"><thead><tr>
      <th>#</th><th>seed</th><th>steps</th><th>return</th><th>time</th><th>outcome</th></tr></thead><tbody></tbody></table></div></section>
  </aside>
</main>
<script>
"use strict";
const q = new URLSearchParams(location.search);
const token = q.get("token");
const tok = token ? "?token=" + encodeURIComponent(token) : "";
let sources = [], lanes = 1, sel = 0, lane = 0, fmt = "jpeg", paused = false, ws = null;
const urls = new Map();   // "s:l" -> object URL
const el = id => document.getElementById(id);
const mime = () => fmt === "png" ? "image/png" : "image/jpeg";
function send(doc) { if (ws && ws.readyState === 1) ws.send(JSON.stringify(doc)); }
function pick(s, l) { sel = s; lane = l; send({op: "select", source: s, lane: l}); drawButtons(); showMain(); }
function drawButtons() {
  const box = el("sources"); box.textContent = "";
  sources.forEach((label, i) => {
    const b = document.createElement("button"); b.textContent = label; b.className = i === sel ? "sel" : "";
    b.onclick = () => pick(i, lane); box.appendChild(b);
  });
  const lb = el("lanes"); lb.textContent = "";
  if (lanes > 1) for (let j = 0; j < lanes; j++) {
    const b = document.createElement("button"); b.textContent = "lane " + j; b.className = j === lane ? "sel" : "";
    b.onclick = () => pick(sel, j); lb.appendChild(b);
  }
  document.querySelectorAll("#grid figure").forEach(f => f.classList.toggle("sel", f.dataset.key === sel + ":" + lane));
}
function showMain() { const u = urls.get(sel + ":" + lane); if (u) el("main").src = u; }
function thumb(key, url) {
  let f = document.querySelector('#grid figure[data-key="' + key + '"]');
  if (!f) {
    f = document.createElement("figure"); f.dataset.key = key;
    const [s, l] = key.split(":").map(Number);
    f.innerHTML = "<img><figcaption></figcaption>";
    f.querySelector("figcaption").textContent = (sources[s] || ("#" + s)) + (lanes > 1 ? " · lane " + l : "");
    f.onclick = () => pick(s, l);
    el("grid").appendChild(f); drawButtons();
  }
  f.querySelector("img").src = url;
}
function onFrame(buf) {
  const dv = new DataView(buf);
  if (dv.getUint8(0) !== 1) return;
  const s = dv.getUint8(1), l = dv.getUint16(2, true);
  const key = s + ":" + l;
  const url = URL.createObjectURL(new Blob([new Uint8Array(buf, 20)], {type: mime()}));
  const old = urls.get(key); urls.set(key, url);
  if (sources.length * lanes > 1) thumb(key, url);
  if (s === sel && l === lane) el("main").src = url;
  if (old) setTimeout(() => URL.revokeObjectURL(old), 1000);
  window.rlmeshFrames = (window.rlmeshFrames || 0) + 1;
}
function fmtTime(t) { t = Math.max(0, Math.floor(t)); const h = Math.floor(t / 3600), m = Math.floor(t % 3600 / 60), s = t % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(s).padStart(2, "0"); }
function ms(x) { return x < 10 ? x.toFixed(1) + "ms" : x.toFixed(0) + "ms"; }
function onHud(h) {
  const parts = [];
  if (h.episode > 0) parts.push("ep " + h.episode + (h.episodes > 0 ? "/" + h.episodes : ""));
  parts.push("step " + h.step, fmtTime(h.elapsed_s));
  if (h.seed >= 0) parts.push("seed " + h.seed);
  parts.push("model " + ms(h.model_ms) + " env " + ms(h.env_ms), h.sps.toFixed(1) + " steps/s", h.fps.toFixed(0) + " fps");
  if (h.chunk_len > 1) parts.push("chunk " + h.chunk_pos + "/" + h.chunk_len);
  if (h.width > 0) parts.push(h.width + "x" + h.height);
  parts.push("R " + (h.reward >= 0 ? "+" : "") + h.reward.toFixed(2));
  if (h.outcome) parts.push(h.outcome);
  if (h.paused) parts.push("PAUSED");
  el("hud").textContent = parts.join(" · ");
  paused = !!h.paused; el("pause").textContent = paused ? "resume" : "pause";
}
function onSeries(d) {
  // both plots arrive drawn (axes, legend) as SVG from the viewer; the page only inserts them
  if (d.reward_svg) el("reward").innerHTML = d.reward_svg;
  if (d.action_svg) el("action").innerHTML = d.action_svg;
  document.querySelectorAll(".lane-note").forEach(n => { n.textContent = lanes > 1 ? " · lane " + (d.lane || 0) : ""; });
}
function fitMain() {
  // scale the picture to the stage, aspect kept; small cameras go up by whole pixels, nearest-neighbour
  const img = el("main"), st = el("stage");
  const w = img.naturalWidth, h = img.naturalHeight;
  if (!w || !h || !st.clientWidth || !st.clientHeight) return;
  let k = Math.min(st.clientWidth / w, st.clientHeight / h);
  if (k >= 2) k = Math.floor(k);
  img.style.width = Math.round(w * k) + "px"; img.style.height = Math.round(h * k) + "px";
  img.style.imageRendering = k > 1 ? "pixelated" : "auto";
  window.rlmeshMainScale = k;
}
function onEpisodes(d) {
  const body = el("eps").querySelector("tbody"); body.textContent = "";
  for (const row of d.rows.slice().reverse()) {
    const tr = document.createElement("tr");
    tr.className = row.success === true ? "ok" : row.success === false ? "bad" : "";
    for (const v of [row.index, row.seed === null ? "-" : row.seed, row.steps, row.return.toFixed(2), row.duration_s.toFixed(1) + "s", row.outcome]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  el("rate").textContent = d.success_rate === null || d.success_rate === undefined
    ? d.episodes + " episodes, no success signal"
    : (100 * d.success_rate).toFixed(1) + " % of " + d.reported + "  (95 % CI " + (100 * d.ci95[0]).toFixed(0) + "-" + (100 * d.ci95[1]).toFixed(0) + " %)";
}
function onText(doc) {
  if (doc.type === "hello" || doc.type === "sources") {
    const changed = JSON.stringify(doc.sources) !== JSON.stringify(sources) || doc.lanes !== lanes;
    sources = doc.sources; lanes = doc.lanes || 1; if (doc.format) fmt = doc.format;
    if (doc.type === "hello") { sel = doc.selected; lane = doc.lane || 0; }
    if (changed || doc.type === "hello") drawButtons();
  } else if (doc.type === "hud") onHud(doc);
  else if (doc.type === "series") onSeries(doc);
  else if (doc.type === "episodes") onEpisodes(doc);
}
function connect() {
  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  ws = new WebSocket(proto + location.host + "/ws" + tok);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { el("status").textContent = "live"; };
  ws.onmessage = ev => { if (typeof ev.data === "string") onText(JSON.parse(ev.data)); else onFrame(ev.data); };
  ws.onclose = () => { el("status").textContent = "disconnected (run ended?) - retrying"; setTimeout(connect, 2000); };
}
el("main").onload = fitMain;
window.addEventListener("resize", fitMain);
el("pause").onclick = () => send({op: paused ? "resume" : "pause"});
el("step").onclick = () => send({op: "step"});
el("skip").onclick = () => send({op: "skip"});
el("quit").onclick = () => { if (confirm("Stop the run?")) send({op: "quit"}); };
document.addEventListener("keydown", e => {
  if (e.key === "p" || e.key === " ") send({op: paused ? "resume" : "pause"});
  else if (e.key === ".") send({op: "step"});
  else if (e.key === "n") send({op: "skip"});
  else if (e.key === "ArrowRight" && sources.length) pick((sel + 1) % sources.length, lane);
  else if (e.key === "ArrowLeft" && sources.length) pick((sel + sources.length - 1) % sources.length, lane);
  else if (e.key >= "1" && e.key <= "9" && +e.key <= sources.length) pick(+e.key - 1, lane);
});
connect();
</script>
</body></html>
"""
