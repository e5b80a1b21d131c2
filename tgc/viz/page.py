"""The viewer's page: one self-contained HTML file (its script and style inline, nothing fetched) whose data is JSON in
a <script type="application/json" id="tgc-viz-data"> tag (read_data reads it back), drawn by the script in the page.

The data: `functions` (each what capture() returns, with the device it ran on and, when profiled, per kernel its
launches' count, seconds, bytes and flops) and `profile` (the launches on a timeline and the table of kernels by
time, each row naming its function) or null.
"""
from __future__ import annotations
import html, json, os, re

_DATA_ID = 'tgc-viz-data'
MAX_LAUNCHES = 20000   # the timeline keeps the first this many launches (the table counts them all)


def profile_data(recorder, functions: list[dict]) -> dict | None:
  """The page's profile from a profiler.Recorder: the device launches (each with the index of its function among
  `functions`: by the CompiledFunction that launched it, their `fn_id`, else the first that has a kernel of that name:
  a specialized copy of a function), the copies and compiles, and the per-kernel table slowest first."""
  if recorder is None: return None
  names = {pid: name for name, pid in recorder.pids.items()}
  by_id = {f.get('fn_id'): i for i, f in enumerate(functions)}
  by_kernel: dict[str, int] = {}
  for i, f in enumerate(functions):
    for k in f['kernels']: by_kernel.setdefault(k['name'], i)
  launches, copies, table = [], [], {}
  for e in recorder.events:
    if e['ph'] != 'X': continue
    if e['cat'] == 'kernel':
      a = e['args']
      fi = by_id.get(a['fn_id'], by_kernel.get(e['name'], -1))
      if len(launches) < MAX_LAUNCHES: launches.append({'name': e['name'], 'fn': fi, 'ts': e['ts'], 'dur': e['dur'], 'track': names[e['pid']]})
      r = table.setdefault((fi, e['name']), {'fn': fi, 'function': a['function'], 'name': e['name'], 'count': 0, 'seconds': 0.0, 'bytes': 0, 'flops': 0, 'times': []})
      r['count'] += 1; r['seconds'] += e['dur'] / 1e6; r['bytes'] += a['bytes']; r['flops'] += a['flops']; r['times'].append(e['dur'] / 1e6)
    elif e['cat'] == 'copy' and len(copies) < MAX_LAUNCHES:
      copies.append({'name': e['name'], 'ts': e['ts'], 'dur': e['dur'], 'track': names[e['pid']] + ' copies', 'bytes': e['args']['bytes']})
    elif e['cat'] == 'compile' and len(copies) < MAX_LAUNCHES:  # (the gaps between launches: the host compiling)
      copies.append({'name': e['name'], 'ts': e['ts'], 'dur': e['dur'], 'track': 'host compile'})
  total = sum(r['seconds'] for r in table.values()) or 1e-12
  rows = sorted(table.values(), key=lambda r: -r['seconds'])
  for r in rows:
    s, ts = max(r['seconds'], 1e-12), sorted(r.pop('times'))
    # (median and max beside the mean: a launch that paid a device's one-time set-up stands out as max >> median)
    r.update(share=r['seconds'] / total, mean=r['seconds'] / r['count'], median=ts[len(ts) // 2], max=ts[-1],
             gbps=r['bytes'] / s / 1e9 if r['bytes'] else None, gflops=r['flops'] / s / 1e9 if r['flops'] else None)
  # (copies: the timeline's other spans, the devices' copies and the host's compiles)
  return {'launches': launches, 'copies': copies, 'table': rows, 'total_seconds': total if rows else 0.0,
          'launch_count': sum(r['count'] for r in rows)}


def build(functions: list[dict], profile: dict | None = None, title: str = 'tgc viz') -> str:
  """The page's HTML."""
  for i, f in enumerate(functions):
    f['index'] = i
    per = {}
    for r in (profile or {}).get('table', []):
      if r['fn'] == i: per[r['name']] = {k: r[k] for k in ('count', 'seconds', 'share', 'mean', 'median', 'max', 'gbps', 'gflops')}
    f['kernel_profile'] = per
    f['seconds'] = sum(v['seconds'] for v in per.values())
    # (the order of the function list: each kernel's launches counted at their median, so that one launch that paid
    # a device's one-time set-up does not put its function first)
    f['typical_seconds'] = sum(v['count'] * v['median'] for v in per.values())
  data = {'title': title, 'functions': functions, 'profile': profile}
  blob = json.dumps(data, separators=(',', ':')).replace('</', '<\\/')  # (no '</script>' inside the tag)
  return _TEMPLATE.replace('{{TITLE}}', html.escape(title)).replace('{{STYLE}}', _STYLE).replace('{{SCRIPT}}', _SCRIPT) \
                  .replace('{{DATA}}', blob)


def write(path: str, functions: list[dict], profile: dict | None = None, title: str = 'tgc viz') -> None:
  text = build(functions, profile, title)
  d = os.path.dirname(os.path.abspath(path))
  os.makedirs(d, exist_ok=True)
  with open(path, 'w') as f: f.write(text)


def read_data(text: str) -> dict:
  """The JSON a page embeds (what tests read back)."""
  m = re.search(r'<script type="application/json" id="' + _DATA_ID + r'">(.*?)</script>', text, re.S)
  if m is None: raise ValueError('no tgc-viz data in this page')
  return json.loads(m.group(1))


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{TITLE}}</title>
<style>{{STYLE}}</style></head>
<body>
<header><b>tgc viz</b> <span id="title"></span>
  <label>function <select id="fnsel"></select></label>
  <nav id="tabs"><button data-tab="kernels" class="on">Kernels</button><button data-tab="pipeline">Pipeline</button><button data-tab="profile">Profile</button></nav>
  <span id="fninfo"></span></header>
<main>
<section id="kernels" class="tab on">
  <div id="top">
    <div id="graphbox"><div class="bar"><span id="graphtitle">kernel graph</span> <label><input type="checkbox" id="tgraph"> tensor graph</label>
      <span class="hint">click a kernel</span></div><div id="graph"></div></div>
    <div id="klistbox"><div class="bar">kernels of this function <span class="hint">(slowest first when profiled; click one)</span></div><table id="klist"></table></div>
  </div>
  <div id="levels">
    <div class="col"><h3>tensor ops <span class="hint">(the input; this kernel's lines marked)</span></h3><pre id="l-tensor"></pre></div>
    <div class="col"><h3>kernel AST <span class="hint">(after kernelize)</span></h3><pre id="l-ast"></pre></div>
    <div class="col"><h3>opts <span class="hint">(kernel-opt)</span></h3><pre id="l-opts"></pre></div>
    <div class="col"><h3>uops</h3><pre id="l-uops"></pre></div>
    <div class="col"><h3>source <span id="l-lang" class="hint"></span></h3><pre id="l-src"></pre></div>
  </div>
</section>
<section id="pipeline" class="tab">
  <div id="steps"></div><div id="stepview"><div class="bar"><span id="steptitle"></span> <label><input type="checkbox" id="fulltext"> whole module</label></div><pre id="diff"></pre></div>
</section>
<section id="profile" class="tab">
  <div class="bar" id="profinfo"></div>
  <div id="timeline"><svg id="tl"></svg><div id="tip"></div></div>
  <table id="ptable"></table>
</section>
</main>
<script type="application/json" id="tgc-viz-data">{{DATA}}</script>
<script>{{SCRIPT}}</script>
</body></html>
"""

_STYLE = r"""
*{box-sizing:border-box}body{margin:0;font:13px system-ui,sans-serif;color:#1d1d1f;background:#f6f7f9;height:100vh;display:flex;flex-direction:column}
header{display:flex;gap:14px;align-items:center;padding:6px 12px;background:#20232a;color:#eee}
header select{max-width:380px}#fninfo{color:#aab;font-size:12px}
nav button{background:#3a3f4b;color:#ddd;border:0;padding:4px 12px;margin-right:2px;border-radius:3px;cursor:pointer}nav button.on{background:#5b8def;color:#fff}
nav button:disabled{opacity:.4;cursor:default}
main{flex:1;min-height:0}.tab{display:none;height:100%}.tab.on{display:flex}
#kernels{flex-direction:column}#top{display:flex;height:42%;min-height:0;border-bottom:1px solid #ccd}
#graphbox{flex:1.3;display:flex;flex-direction:column;min-width:0;border-right:1px solid #ccd}#graph{flex:1;overflow:auto;background:#fff}
#klistbox{flex:1;display:flex;flex-direction:column;min-width:0;overflow:auto;background:#fff}
.bar{padding:4px 8px;background:#e9ecf1;font-size:12px;display:flex;gap:10px;align-items:center}.hint{color:#778;font-size:11px;font-weight:normal}
#levels{flex:1;display:flex;min-height:0}.col{flex:1;display:flex;flex-direction:column;min-width:0;border-right:1px solid #ccd}
.col h3{margin:0;padding:4px 8px;font-size:12px;background:#e9ecf1}
pre{position:relative;margin:0;flex:1;overflow:auto;padding:6px;font:11px/1.45 ui-monospace,Menlo,Consolas,monospace;background:#fff;white-space:pre}
pre .ln{display:block}pre .mark{background:#fff3b0}pre .hot{background:#ffd36e}pre .no{color:#99a;user-select:none;display:inline-block;width:3.2em}
pre .add{background:#e3f6e3;display:block}pre .del{background:#fde4e4;display:block}pre .hunk{color:#67a;display:block}
table{border-collapse:collapse;width:100%;font-size:12px}th,td{padding:3px 8px;text-align:right;border-bottom:1px solid #eee;white-space:nowrap}
th{background:#f0f2f5;position:sticky;top:0}td:first-child,th:first-child,td.l{text-align:left}tr.sel{background:#dbe8ff}tbody tr{cursor:pointer}tbody tr:hover{background:#eef3ff}
.bar-share{display:inline-block;height:8px;background:#f0a040;vertical-align:middle;margin-right:4px}
svg text{font:11px ui-monospace,Menlo,monospace;pointer-events:none}
.node rect{stroke:#557;stroke-width:1;cursor:pointer}.node.kernel rect{fill:#dbe8ff}.node.input rect{fill:#f4f4f4}.node.output rect{fill:#e8f5e0}.node.const rect{fill:#f7f0ff}.node.op rect{fill:#fff}
.node.sel rect{stroke:#d22;stroke-width:2.5}.edge{fill:none;stroke:#8a90a0;stroke-width:1.2}.edge:hover{stroke:#d22;stroke-width:2}
#pipeline{flex-direction:row}#steps{width:300px;overflow:auto;background:#fff;border-right:1px solid #ccd}
#steps div{padding:5px 10px;border-bottom:1px solid #eee;cursor:pointer;font-family:ui-monospace,monospace;font-size:12px;display:flex;justify-content:space-between;gap:8px}#steps div.sel{background:#dbe8ff}#steps div.same{color:#99a}
#steps .t{color:#778;white-space:nowrap;flex-shrink:0}#stepview{flex:1;display:flex;flex-direction:column;min-width:0}
#profile{flex-direction:column}#timeline{position:relative;height:220px;background:#fff;border-bottom:1px solid #ccd;overflow:hidden}#tl{width:100%;height:100%;cursor:grab}
#tip{position:absolute;display:none;background:#20232a;color:#fff;padding:4px 8px;font-size:12px;border-radius:3px;pointer-events:none;white-space:pre}
#profile table{display:block;overflow:auto;flex:1}
"""

_SCRIPT = r"""
'use strict';
const D = JSON.parse(document.getElementById('tgc-viz-data').textContent);
const $ = id => document.getElementById(id);
const el = (tag, attrs, text) => { const e = document.createElement(tag); for (const k in attrs || {}) e.setAttribute(k, attrs[k]); if (text != null) e.textContent = text; return e; };
const svgel = (tag, attrs) => { const e = document.createElementNS('http://www.w3.org/2000/svg', tag); for (const k in attrs) e.setAttribute(k, attrs[k]); return e; };
const fmtS = s => s >= 1 ? s.toFixed(3) + ' s' : s >= 1e-3 ? (s * 1e3).toFixed(3) + ' ms' : (s * 1e6).toFixed(1) + ' us';
const fmtB = n => n >= 1 << 30 ? (n / (1 << 30)).toFixed(1) + ' GB' : n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + ' MB' : n >= 1024 ? (n / 1024).toFixed(1) + ' KB' : n + ' B';
const num = (v, d) => v == null ? '-' : v.toFixed(d);
const hue = name => { let h = 0; for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 360; return h; };  // a colour per name
let F = null, K = null, step = 0;

$('title').textContent = D.title;
const order = D.functions.map((f, i) => i).sort((a, b) => D.functions[b].typical_seconds - D.functions[a].typical_seconds || a - b);
for (const i of order) {
  const f = D.functions[i];
  $('fnsel').appendChild(el('option', {value: i}, `#${i} @${f.name} (${f.kernels.length} kernels${f.seconds ? ', ' + fmtS(f.seconds) : ''})`));
}
$('fnsel').onchange = () => selectFunction(+$('fnsel').value);
for (const b of document.querySelectorAll('nav button')) b.onclick = () => showTab(b.dataset.tab);
if (!D.profile) document.querySelector('nav button[data-tab=profile]').disabled = true;
function showTab(t) {
  for (const b of document.querySelectorAll('nav button')) b.classList.toggle('on', b.dataset.tab === t);
  for (const s of document.querySelectorAll('.tab')) s.classList.toggle('on', s.id === t);
  if (t === 'profile') drawTimeline();
}

function selectFunction(i, kernel) {
  F = D.functions[i]; $('fnsel').value = i;
  $('fninfo').textContent = `${F.file} · target ${F.target}${F.device ? ' · device ' + F.device : ''} · ${F.kernels.length} kernels · input at the ${F.level} level`;
  $('tgraph').disabled = !F.tensor_graph; $('tgraph').checked = false;
  drawGraph(); kernelList(); steps();
  const ks = sortedKernels();
  selectKernel(kernel || (ks.length ? ks[0].name : null));
}
function sortedKernels() {
  const p = F.kernel_profile || {};
  return F.kernels.slice().sort((a, b) => ((p[b.name] || {}).seconds || 0) - ((p[a.name] || {}).seconds || 0));
}

function drawGraph() {
  const tg = $('tgraph').checked && F.tensor_graph, G = tg ? F.tensor_graph : F.graph, L = G.layout, box = L.boxes;
  $('graphtitle').textContent = tg ? 'tensor graph (ops coloured by their kernel)' : 'kernel graph (kernels, buffers)';
  const s = svgel('svg', {width: L.width, height: L.height});
  const defs = svgel('defs', {}); const mk = svgel('marker', {id: 'arr', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto'});
  mk.appendChild(svgel('path', {d: 'M0,0L10,5L0,10z', fill: '#8a90a0'})); defs.appendChild(mk); s.appendChild(defs);
  const prof = F.kernel_profile || {};
  const maxs = Math.max(1e-12, ...Object.values(prof).map(p => p.seconds));
  for (const e of G.edges) {
    const a = box[e.src], b = box[e.dst]; if (!a || !b) continue;
    const x1 = a[0] + a[2] / 2, y1 = a[1] + a[3], x2 = b[0] + b[2] / 2, y2 = b[1], my = (y1 + y2) / 2;
    const p = svgel('path', {d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`, class: 'edge', 'marker-end': 'url(#arr)'});
    const t = svgel('title', {}); t.textContent = `${e.value}: ${e.type}${e.bytes ? '  ' + fmtB(e.bytes) : ''}`; p.appendChild(t);
    s.appendChild(p);
    if (!tg && G.edges.length <= 40) { const lt = svgel('text', {x: (x1 + x2) / 2 + 4, y: my + 3, fill: '#667'}); lt.textContent = `${e.type}${e.bytes ? ' ' + fmtB(e.bytes) : ''}`; s.appendChild(lt); }
  }
  // the tensor graph: each op in the colour of the kernel that computes it (its line among the kernel's lines)
  const owner = {}, colour = {};
  if (tg) F.kernels.forEach((k, i) => { colour[k.name] = (i * 137.5) % 360; for (const l of k.lines) if (!(l in owner)) owner[l] = k.name; });
  for (const n of G.nodes) {
    const kn = n.kind === 'kernel' ? n.label : (tg && owner[n.line]) || '';
    const b = box[n.id], g = svgel('g', {class: 'node ' + n.kind, 'data-k': kn});
    const r = svgel('rect', {x: b[0], y: b[1], width: b[2], height: b[3], rx: n.kind === 'kernel' ? 6 : 14});
    if (n.kind === 'kernel' && prof[n.label]) r.setAttribute('style', `fill:hsl(${40 - 40 * prof[n.label].seconds / maxs},90%,${90 - 20 * prof[n.label].seconds / maxs}%)`);
    if (tg && kn && n.kind !== 'input') r.setAttribute('style', `fill:hsl(${colour[kn]},70%,84%)`);
    g.appendChild(r);
    const t1 = svgel('text', {x: b[0] + 8, y: b[1] + 14}); t1.textContent = n.label; g.appendChild(t1);
    const t2 = svgel('text', {x: b[0] + 8, y: b[1] + 27, fill: '#667'}); t2.textContent = n.kind === 'kernel' && prof[n.label] ? fmtS(prof[n.label].seconds) + ' · ' + n.detail : n.detail; g.appendChild(t2);
    const tt = svgel('title', {}); tt.textContent = n.label + '\n' + n.detail + (tg && kn ? '\nin kernel ' + kn : ''); g.appendChild(tt);
    if (kn) g.onclick = () => selectKernel(kn);
    s.appendChild(g);
  }
  $('graph').replaceChildren(s);
  markGraph();
}
$('tgraph').onchange = drawGraph;
function markGraph() {
  for (const g of document.querySelectorAll('#graph .node')) g.classList.toggle('sel', !!K && g.dataset.k === K.name);
  const sel = document.querySelector('#graph .node.sel rect');
  if (sel) { const c = $('graph'), x = +sel.getAttribute('x'), y = +sel.getAttribute('y');
    if (x < c.scrollLeft || x > c.scrollLeft + c.clientWidth - 60 || y < c.scrollTop || y > c.scrollTop + c.clientHeight - 40) { c.scrollLeft = x - c.clientWidth / 2; c.scrollTop = y - c.clientHeight / 2; } }
}

function kernelList() {
  const t = $('klist'); t.replaceChildren();
  const prof = F.kernel_profile || {}, hasP = Object.keys(prof).length > 0;
  const h = el('tr'); for (const c of ['kernel', 'grid', hasP ? 'total' : 'uops', hasP ? 'share' : 'FLOPs', hasP ? 'median' : '', hasP ? 'max' : '', 'bytes', hasP ? 'GB/s' : '', hasP ? 'GFLOP/s' : '']) h.appendChild(el('th', {}, c));
  const th = el('thead'); th.appendChild(h); t.appendChild(th);
  const tb = el('tbody');
  for (const k of sortedKernels()) {
    const p = prof[k.name], r = el('tr', {'data-k': k.name});
    r.appendChild(el('td', {}, k.name)); r.appendChild(el('td', {class: 'l'}, `${JSON.stringify(k.global_size)} ${JSON.stringify(k.local_size)}`));
    if (hasP) {
      r.appendChild(el('td', {}, p ? fmtS(p.seconds) : '-'));
      const sh = el('td'); if (p) { sh.appendChild(el('span', {class: 'bar-share', style: `width:${Math.round(60 * p.share)}px`})); sh.appendChild(document.createTextNode((100 * p.share).toFixed(1) + '%')); } r.appendChild(sh);
      r.appendChild(el('td', {}, p ? fmtS(p.median) : '-')); r.appendChild(el('td', {}, p ? fmtS(p.max) : '-'));
    } else { r.appendChild(el('td', {}, k.uop_count)); r.appendChild(el('td', {}, k.flops)); r.appendChild(el('td')); r.appendChild(el('td')); }
    r.appendChild(el('td', {}, fmtB(k.bytes || 0)));
    r.appendChild(el('td', {}, hasP && p ? num(p.gbps, 2) : '')); r.appendChild(el('td', {}, hasP && p ? num(p.gflops, 2) : ''));
    r.onclick = () => selectKernel(k.name); tb.appendChild(r);
  }
  t.appendChild(tb);
}

function lines(pre, text, cls) {  // a <pre> of numbered lines; cls(i) -> extra class of line i (1-based)
  pre.replaceChildren();
  const ls = (text || '').split('\n');
  ls.forEach((l, i) => { const d = el('span', {class: 'ln ' + (cls ? cls(i + 1) : ''), 'data-n': i + 1}); d.appendChild(el('span', {class: 'no'}, i + 1)); d.appendChild(document.createTextNode(l)); pre.appendChild(d); });
  return pre;
}
function scrollTo(pre, sel) { const e = pre.querySelector(sel); if (e) pre.scrollTop = e.offsetTop - pre.clientHeight / 3; }

function selectKernel(name) {
  K = F.kernels.find(k => k.name === name) || null;
  for (const r of document.querySelectorAll('#klist tbody tr')) r.classList.toggle('sel', !!K && r.dataset.k === name);
  markGraph();
  if (!K) { for (const id of ['l-tensor', 'l-ast', 'l-opts', 'l-uops', 'l-src']) $(id).textContent = ''; lines($('l-tensor'), F.source); return; }
  const mine = new Set(K.lines);
  const owner = {}; for (const k of F.kernels) for (const l of k.lines) (owner[l] = owner[l] || []).push(k.name);
  const tp = lines($('l-tensor'), F.source, i => mine.has(i) ? 'mark' : '');
  for (const d of tp.children) { const n = +d.dataset.n; if (owner[n]) { d.style.cursor = 'pointer'; d.title = 'computed in ' + owner[n].join(', '); d.onclick = () => selectKernel(owner[n].includes(K.name) ? K.name : owner[n][0]); } }
  scrollTo(tp, '.mark');
  const ap = lines($('l-ast'), K.ast || '(no kernel-level form: the input was below it)');
  for (const d of ap.children) { const src = (K.ast_locs || [])[+d.dataset.n - 1]; if (src) { d.title = `line ${src} of the input`;
    d.onmouseenter = () => { for (const x of tp.children) x.classList.toggle('hot', +x.dataset.n === src); scrollTo(tp, '.hot'); };
    d.onmouseleave = () => { for (const x of tp.children) x.classList.remove('hot'); }; } }
  const p = (F.kernel_profile || {})[K.name];
  const info = [`opts applied: ${K.opts}`, '', `launch grid: global ${JSON.stringify(K.global_size)} local ${JSON.stringify(K.local_size)}`,
    `uops: ${K.uop_count}`, `FLOPs per launch: ${K.flops}`, `bytes per launch: ${fmtB(K.bytes || 0)} (the buffers it reads and writes)`,
    p ? `\nprofiled: ${p.count} launches, ${fmtS(p.seconds)} total (${(100 * p.share).toFixed(1)}% of all), ${fmtS(p.mean)} each\n  ${num(p.gbps, 2)} GB/s, ${num(p.gflops, 2)} GFLOP/s` : '',
    '', 'the kernel after kernel-opt:', K.opt_ast || '(kernel-opt did not run)'];
  $('l-opts').textContent = info.join('\n');
  lines($('l-uops'), K.uops); lines($('l-src'), K.source); $('l-lang').textContent = '(' + F.target + ')';
}

function steps() {
  const s = $('steps'); s.replaceChildren();
  F.steps.forEach((st, i) => {
    const d = el('div', {class: st.changed ? '' : 'same'}); d.appendChild(el('span', {}, `${i}. ${st.name}`));
    d.appendChild(el('span', {class: 't'}, i ? (st.changed ? '' : 'no change · ') + fmtS(st.seconds) : ''));
    d.onclick = () => showStep(i); s.appendChild(d);
  });
  const first = F.steps.findIndex((st, i) => i > 0 && st.changed);  // (the first pass that changed something)
  showStep(first > 0 ? first : 0);
}
function showStep(i) {
  step = i; const st = F.steps[i];
  [...$('steps').children].forEach((d, j) => d.classList.toggle('sel', j === i));
  const full = $('fulltext').checked || i === 0;
  $('steptitle').textContent = i === 0 ? 'the input' : full ? `IR after ${st.name}` : `what ${st.name} changed (unified diff)`;
  const pre = $('diff');
  if (full) { lines(pre, st.text == null ? '(the module was too large to keep whole: see the diff)' : st.text); return; }
  pre.replaceChildren();
  if (!st.changed) { pre.textContent = `${st.name} changed nothing`; return; }
  for (const l of st.diff.split('\n')) pre.appendChild(el('span', {class: l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : 'ln'}, l));
}
$('fulltext').onchange = () => showStep(step);

// ---- profile: the launches on a timeline (wheel zooms, drag pans, click opens the kernel) and the table
let view = null;
function drawTimeline() {
  const P = D.profile; if (!P) return;
  const svg = $('tl'), W = svg.clientWidth || 1200;
  const items = P.launches.concat(P.copies || []);
  if (!items.length) { $('profinfo').textContent = 'no launches were profiled'; return; }
  const t0 = Math.min(...items.map(e => e.ts)), t1 = Math.max(...items.map(e => e.ts + e.dur));
  if (!view) view = [t0, t1 + (t1 - t0) * 0.01 + 1];
  const tracks = [...new Set(items.map(e => e.track))].sort((a, b) => (a === 'host compile') - (b === 'host compile'));
  const x = t => 120 + (t - view[0]) / (view[1] - view[0]) * (W - 130);
  svg.replaceChildren();
  tracks.forEach((tr, i) => { const t = svgel('text', {x: 6, y: 40 + i * 34 + 14}); t.textContent = tr; svg.appendChild(t);
    svg.appendChild(svgel('line', {x1: 0, x2: W, y1: 40 + i * 34 + 28, y2: 40 + i * 34 + 28, stroke: '#eee'})); });
  for (let k = 0; k <= 8; k++) { const t = view[0] + (view[1] - view[0]) * k / 8, tx = svgel('text', {x: x(t), y: 14, fill: '#778'}); tx.textContent = fmtS((t - t0) / 1e6); svg.appendChild(tx); }
  for (const e of items) {
    const a = x(e.ts), b = x(e.ts + e.dur); if (b < 120 || a > W) continue;
    const r = svgel('rect', {x: Math.max(a, 120), y: 40 + tracks.indexOf(e.track) * 34, width: Math.max(b - Math.max(a, 120), 1), height: 24, fill: `hsl(${hue(e.name)},60%,65%)`});
    r.onmousemove = ev => { const tip = $('tip'); tip.style.display = 'block'; tip.style.left = (ev.offsetX + 12) + 'px'; tip.style.top = (ev.offsetY + 12) + 'px';
      tip.textContent = `${e.name}${e.fn >= 0 ? '  (#' + e.fn + ' @' + D.functions[e.fn].name + ')' : ''}\n${fmtS(e.dur / 1e6)}${e.bytes ? '  ' + fmtB(e.bytes) : ''}`; };
    r.onmouseleave = () => { $('tip').style.display = 'none'; };
    if (e.fn >= 0) r.onclick = () => { showTab('kernels'); selectFunction(e.fn, e.name); };
    svg.appendChild(r);
  }
  svg.onwheel = ev => { ev.preventDefault(); const c = view[0] + (ev.offsetX - 120) / (W - 130) * (view[1] - view[0]), f = ev.deltaY > 0 ? 1.25 : 0.8;
    view = [c - (c - view[0]) * f, c + (view[1] - c) * f]; drawTimeline(); };
  svg.onmousedown = ev => { const sx = ev.clientX, v0 = view.slice(); svg.onmousemove = m => { const d = (m.clientX - sx) / (W - 130) * (v0[1] - v0[0]); view = [v0[0] - d, v0[1] - d]; drawTimeline(); }; };
  svg.onmouseup = svg.onmouseleave = () => { svg.onmousemove = null; };
}
function profileTable() {
  const P = D.profile; if (!P) return;
  $('profinfo').textContent = `${P.launch_count} launches, ${fmtS(P.total_seconds)} of device time · wheel zooms the timeline, drag pans, click a launch or a row to see the kernel, a column's head to sort by it`;
  const t = $('ptable'), h = el('tr');
  const cols = [['kernel', 'name'], ['function', 'fn'], ['count', 'count'], ['total', 'seconds'], ['share', 'share'], ['mean', 'mean'], ['median', 'median'], ['max', 'max'], ['GB/s', 'gbps'], ['GFLOP/s', 'gflops']];
  for (const [c, key] of cols) { const x = el('th', {title: 'sort by ' + c}, c); x.style.cursor = 'pointer';
    x.onclick = () => { const up = key === 'name' || key === 'fn'; P.table.sort((a, b) => up ? (a[key] > b[key]) - (a[key] < b[key]) : (b[key] || 0) - (a[key] || 0)); t.replaceChildren(); profileTable(); }; h.appendChild(x); }
  const th = el('thead'); th.appendChild(h); t.appendChild(th);
  const tb = el('tbody');
  for (const r of P.table) {
    const tr = el('tr');
    tr.appendChild(el('td', {}, r.name)); tr.appendChild(el('td', {class: 'l'}, r.fn >= 0 ? `#${r.fn} @${r.function}` : '@' + r.function));
    tr.appendChild(el('td', {}, r.count)); tr.appendChild(el('td', {}, fmtS(r.seconds)));
    const sh = el('td'); sh.appendChild(el('span', {class: 'bar-share', style: `width:${Math.round(80 * r.share)}px`})); sh.appendChild(document.createTextNode((100 * r.share).toFixed(1) + '%')); tr.appendChild(sh);
    tr.appendChild(el('td', {}, fmtS(r.mean))); tr.appendChild(el('td', {}, fmtS(r.median))); tr.appendChild(el('td', {}, fmtS(r.max))); tr.appendChild(el('td', {}, num(r.gbps, 2))); tr.appendChild(el('td', {}, num(r.gflops, 2)));
    if (r.fn >= 0) tr.onclick = () => { showTab('kernels'); selectFunction(r.fn, r.name); };
    tb.appendChild(tr);
  }
  t.appendChild(tb);
}

profileTable();
// the address's #tab[:function[:kernel]] opens that view (#kernels:10:r_8_16_16), else the slowest function
const [want, wfn, wk] = decodeURIComponent(location.hash.slice(1)).split(':');
if (D.functions.length) selectFunction(wfn && D.functions[+wfn] ? +wfn : order[0], wk);
if (want && document.getElementById(want)) showTab(want);
"""
