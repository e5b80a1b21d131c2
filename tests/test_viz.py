"""The pipeline viewer and the launch trace: tgc-viz's page read back through the JSON it embeds, the Chrome trace
read back with json.load (its required fields per event), PROFILE= and VIZ= on whole programs, and the page loaded
once in headless Chromium where one is installed."""
from __future__ import annotations
import json, os, shutil, subprocess, sys
import numpy as np
import pytest
from tgc.viz import capture, page
from tgc.viz.tool import main as viz_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOFTMAX = os.path.join(ROOT, 'examples', 'softmax.tgc')
ENV = {**os.environ, 'PYTHONPATH': os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')])}
ENV.pop('DEBUG', None)

TWO_KERNELS = """func.func @norm(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  %s = tensor.reduce add %x [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %y = tensor.matmul %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %se = tensor.expand %s : tensor<4x1xf32> -> tensor<4x8xf32>
  %z = tensor.mul %y, %se : tensor<4x8xf32>
  func.return %z, %s : tensor<4x8xf32>, tensor<4x1xf32>
}
"""


def test_the_page_embeds_each_pass_and_each_kernels_levels():
  from tgc.passes.pipelines import lower_to_uop_steps
  text = open(SOFTMAX).read()
  data = page.read_data(page.build([capture.capture(text, SOFTMAX, 'c')]))
  f, = data['functions']
  assert data['profile'] is None and f['name'] == 'softmax' and f['source'] == text
  # every pass of the target's pipeline is a step, after the input; a step's diff is what its text changed
  assert [s['name'] for s in f['steps']] == ['input'] + lower_to_uop_steps('c')
  kz = next(s for s in f['steps'] if s['name'].startswith('kernelize'))
  assert kz['changed'] and '+kernel.func @r_4_8(' in kz['diff'] and '-  %m = tensor.reduce max' in kz['diff']
  assert not f['steps'][1]['changed'] and f['steps'][1]['diff'] == ''  # (canonicalize leaves softmax as it is)
  assert f['steps'][-1]['text'].startswith('uop.func @r_4_8(')
  k, = f['kernels']
  assert k['name'] == 'r_4_8' and k['ast'].startswith('kernel.func @r_4_8(') and 'kernel.reduce max' in k['ast']
  assert k['opts'].startswith('[') and 'opts = ' in k['opt_ast'] and k['uops'].startswith('uop.func @r_4_8(')
  assert 'void r_4_8(' in k['source'] and k['global_size'] and k['flops'] > 0 and k['bytes'] == 2 * 4 * 8 * 4
  # the tensor op -> kernel links: the input lines the kernel's ops came from, per line of its AST
  lines = text.split('\n')
  assert {3, 5, 8, 9, 11} <= set(k['lines']) and 'tensor.reduce max' in lines[3 - 1]
  ast = k['ast'].split('\n')
  assert len(k['ast_locs']) == len(ast) and 'kernel.reduce max' in ast[k['ast_locs'].index(3)]


def test_the_kernel_graph_has_buffers_with_shapes_dtypes_bytes_and_a_layout():
  f = capture.capture(TWO_KERNELS, 'two.tgc', 'llvm')
  g = f['graph']
  kinds = {n['id']: n['kind'] for n in g['nodes']}
  assert sorted(kinds.values()) == ['input', 'input', 'kernel', 'kernel', 'output', 'output']
  inner = [e for e in g['edges'] if kinds[e['src']] == kinds[e['dst']] == 'kernel']
  assert [(e['shape'], e['dtype'], e['bytes']) for e in inner] == [([4, 1], 'f32', 16)]
  box = g['layout']['boxes']
  assert set(box) == set(kinds)
  for e in g['edges']: assert box[e['src']][1] < box[e['dst']][1]  # (edges point down the layers)
  assert f['tensor_graph'] and len(f['tensor_graph']['nodes']) == 2 + 5
  # each op knows its input line, so the viewer colours it by the kernel whose lines hold it
  lines = {n['label'].split(' = ')[-1]: n['line'] for n in f['tensor_graph']['nodes'] if n['kind'] == 'op'}
  owner = {l: k['name'] for k in f['kernels'] for l in k['lines']}
  assert owner[lines['tensor.reduce']] != owner[lines['tensor.matmul']] == owner[lines['tensor.mul']]


@pytest.mark.parametrize('level,first', [('kernelize', 'kernel-opt{target=c}'), ('lower-to-uop{target=c}', None)])
def test_the_page_of_ir_below_the_tensor_level(level, first):
  """Input already at the kernel level runs the pipeline from kernel-opt on; at the uop level there is no pass to
  run, and the page shows its kernels as they are (their opts as the IR prints them)."""
  from tgc.parser import parse
  from tgc.passes.manager import PassManager
  m = parse(open(SOFTMAX).read(), SOFTMAX)
  PassManager.parse(level).run(m)
  f = capture.capture(m.print(), 'low.tgc', 'c')
  assert [s['name'] for s in f['steps']][1:2] == ([first] if first else [])
  k, = f['kernels']
  assert k['opts'] == '[unroll(axis = 1, amt = 0)]' and 'void r_4_8(' in k['source']
  assert [n['kind'] for n in f['graph']['nodes']] == ['input', 'kernel', 'output']


def test_the_trace_has_every_field_chrome_needs(tmp_path, monkeypatch):
  from tgc import Tensor
  monkeypatch.setenv('TGC_CACHE_DIR', str(tmp_path / 'cache'))  # (a function compiled before is loaded: no passes to trace)
  from tgc.compiler import profile
  path = tmp_path / 'trace.json'
  a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 100
  p = profile(str(path))
  with p as launches:
    x = Tensor(a)
    y = (x * 3 + 1).relu().sum(1)
    got = y.numpy()
  np.testing.assert_allclose(got, np.maximum(a * 3 + 1, 0).sum(1), rtol=1e-5)
  assert launches and all(isinstance(n, str) and isinstance(t, float) and t > 0 for n, t in launches)
  data = json.load(open(path))
  ev = data['traceEvents']
  for e in ev:
    for k in ('ph', 'ts', 'pid', 'tid', 'name'): assert k in e, (k, e)
    if e['ph'] == 'X': assert e['dur'] >= 0 and isinstance(e['ts'], (int, float))
  procs = {e['pid']: e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'process_name'}
  threads = {(e['pid'], e['tid']): e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'thread_name'}
  by = lambda cat: [e for e in ev if e.get('cat') == cat]
  kernels = by('kernel')
  assert [e['name'] for e in kernels] == [n for n, _ in launches]
  assert all(procs[e['pid']] == 'CPU' and threads[e['pid'], e['tid']] == 'stream 0' for e in kernels)
  assert all(e['args']['bytes'] > 0 and e['args']['flops'] > 0 for e in kernels)
  assert all(procs[e['pid']] == 'host' for e in by('launch') + by('compile') + by('pass'))
  assert {'kernelize', 'linearize'} <= {e['name'] for e in by('pass')}
  assert any(e['name'].startswith('compile function @') for e in by('compile'))
  # each kernel's own compile phase (the CPU emits LLVM IR per kernel, then compiles them as one module)
  assert {f"emit llvm @{n}" for n, _ in launches} <= {e['name'] for e in by('compile')}
  assert any(e['name'] == 'copy in' and e['args']['bytes'] == a.nbytes for e in by('copy'))
  assert any(e['ph'] == 'C' and 'bytes' in e['args'] for e in ev) and by('allocator')
  # the same launches as a table, slowest first
  rows = data['otherData']['summary']
  assert [r['seconds'] for r in rows] == sorted((r['seconds'] for r in rows), reverse=True)
  assert sum(r['count'] for r in rows) == len(launches) and abs(sum(r['share'] for r in rows) - 1) < 1e-9
  assert p.summary().split('\n')[0].split() == ['kernel', 'count', 'total', 'ms', 'share', 'mean', 'us', 'GB/s', 'GFLOP/s']


def test_PROFILE_traces_a_whole_program(tmp_path):
  prog = "from tgc import Tensor\nimport numpy as np\nprint((Tensor(np.ones((8, 8), np.float32)) @ Tensor(np.ones((8, 8), np.float32))).sum().item())\n"
  trace = tmp_path / 't.json'
  r = subprocess.run([sys.executable, '-c', prog], env={**ENV, 'PROFILE': str(trace)}, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == '512.0'
  assert 'PROFILE: kernel launches by time' in r.stderr and 'GFLOP/s' in r.stderr
  ev = json.load(open(trace))['traceEvents']
  assert any(e.get('cat') == 'kernel' for e in ev) and any(e.get('cat') == 'copy' for e in ev)


def test_VIZ_writes_one_page_of_every_compiled_function(tmp_path):
  prog = ("from tgc import Tensor\nimport numpy as np\nx = Tensor(np.ones((4, 8), np.float32))\n"
          "print(x.softmax(1).numpy().sum(), (x * 2).sum().item())\n")
  out = tmp_path / 'v.html'
  r = subprocess.run([sys.executable, '-c', prog], env={**ENV, 'VIZ': str(out)}, capture_output=True, text=True, timeout=600, cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  assert f"VIZ: {out}" in r.stderr
  data = page.read_data(out.read_text())
  assert len(data['functions']) == 2
  names = {k['name'] for f in data['functions'] for k in f['kernels']}
  assert {r_['name'] for r_ in data['profile']['table']} == names
  assert all(r_['fn'] in (0, 1) for r_ in data['profile']['table'])


def test_tgc_viz_on_an_ir_file_with_a_profiled_run(tmp_path, capsys):
  out, trace = tmp_path / 'p.html', tmp_path / 't.json'
  assert viz_main([SOFTMAX, '--run', '3', '-o', str(out), '--trace', str(trace)]) == 0
  data = page.read_data(out.read_text())
  row, = data['profile']['table']
  assert row['name'] == 'r_4_8' and row['count'] == 3 and row['fn'] == 0 and row['share'] == 1.0
  assert data['functions'][0]['kernel_profile']['r_4_8']['count'] == 3
  assert len(data['profile']['launches']) == 3
  assert sum(1 for e in json.load(open(trace))['traceEvents'] if e.get('cat') == 'kernel') == 3
  # the same launches from the trace file, for a page made later
  again = tmp_path / 'q.html'
  assert viz_main([SOFTMAX, '--profile', str(trace), '-o', str(again)]) == 0
  assert page.read_data(again.read_text())['profile']['table'][0]['count'] == 3
  html = out.read_text()
  assert '<script src' not in html and '<link' not in html and 'http://' not in html.replace('http://www.w3.org/2000/svg', '')


def test_tgc_viz_on_a_program(tmp_path):
  prog = tmp_path / 'prog.py'
  prog.write_text("import sys\nfrom tgc import Tensor\nimport numpy as np\n"
                  "n = int(sys.argv[1])\nprint((Tensor(np.ones(n, np.float32)) + 1).sum().item())\n")
  out = tmp_path / 'prog.html'
  assert viz_main([str(prog), '-o', str(out), '--', '16']) == 0
  data = page.read_data(out.read_text())
  f, = data['functions']
  assert f['source'].startswith('func.func @main(%arg0: tensor<16xf32>)') and data['profile']['launch_count'] >= 1


def test_tgc_viz_shows_a_function_the_process_compiled_before_it_started(tmp_path):
  """A graph this process realized before the viewer started is compiled again under it: its launches are on the
  page as a function's, with the function's kernels."""
  from tgc import Tensor
  (Tensor(np.ones(24, np.float32)) * 3 - 1).numpy()
  prog = tmp_path / 'again.py'
  prog.write_text("from tgc import Tensor\nimport numpy as np\nprint((Tensor(np.ones(24, np.float32)) * 3 - 1).numpy())\n")
  out = tmp_path / 'again.html'
  assert viz_main([str(prog), '-o', str(out)]) == 0
  data = page.read_data(out.read_text())
  f, = data['functions']
  rows = data['profile']['table']
  assert rows and all(r['fn'] == 0 and r['name'] in [k['name'] for k in f['kernels']] for r in rows)


def test_tgc_viz_on_a_program_that_fails(tmp_path, capsys):
  prog = tmp_path / 'fails.py'
  prog.write_text("from tgc import Tensor\nimport numpy as np\nprint((Tensor(np.ones(4, np.float32)) * 2).sum().item())\nraise ValueError('the program failed')\n")
  out = tmp_path / 'fails.html'
  assert viz_main([str(prog), '-o', str(out)]) == 1
  err = capsys.readouterr().err
  assert 'ValueError: the program failed' in err and 'internal error' not in err
  assert len(page.read_data(out.read_text())['functions']) == 1  # (what it compiled before it failed)


def test_tgc_viz_reports_bad_input(tmp_path, capsys):
  bad = tmp_path / 'bad.tgc'
  bad.write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = tensor.nope %x : tensor<4xf32>\n}\n")
  assert viz_main([str(bad)]) == 1
  err = capsys.readouterr().err
  assert f"{bad}:2:" in err and 'error:' in err and 'Traceback' not in err
  assert viz_main([str(tmp_path / 'missing.tgc')]) == 1
  assert "tgc-viz: error: cannot open" in capsys.readouterr().err
  assert viz_main([SOFTMAX, '--trace', 'x.json']) == 2
  assert viz_main([SOFTMAX, '--profile', str(bad)]) == 1 and "cannot read the trace" in capsys.readouterr().err


def _chromium():
  return next((p for p in map(shutil.which, ('chromium', 'chromium-browser', 'google-chrome')) if p), None)


def _dump_dom(page_path, tmp_path) -> str:
  r = subprocess.run([_chromium(), '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                      '--disable-background-networking', '--disable-component-update', '--disable-sync',
                      f'--user-data-dir={tmp_path / "profile"}', '--dump-dom', f'file://{page_path}'], capture_output=True, text=True, timeout=120)
  return r.stdout


@pytest.mark.skipif(_chromium() is None, reason='no headless Chromium on PATH (apt-get install chromium): the page is not loaded in a browser')
def test_the_page_draws_in_headless_chromium(tmp_path):
  out = tmp_path / 'p.html'
  assert viz_main([SOFTMAX, '--run', '2', '-o', str(out)]) == 0
  # a person's clicks, played by a script added to a copy of the page: the profile table's row opens its kernel,
  # a pass's step shows its diff
  clicks = ("<script>document.querySelector('#ptable tbody tr').click();"
            "document.querySelectorAll('#steps div')[5].click();"
            "document.body.dataset.after = document.querySelector('nav button.on').dataset.tab + '|' +"
            " document.querySelector('#klist tr.sel').dataset.k + '|' + document.getElementById('steptitle').textContent;</script></body>")
  played = tmp_path / 'clicked.html'
  played.write_text(out.read_text().replace('</body>', clicks))
  dom = _dump_dom(played, tmp_path)
  assert 'data-after="kernels|r_4_8|what kernelize changed (unified diff)"' in dom
  assert '<span class="add">+kernel.func @r_4_8(' in dom
  dom = _dump_dom(out, tmp_path)
  # what the page's script drew: the graph's kernel node, the kernel table's row, the levels, the pipeline's steps
  assert '<g class="node kernel' in dom and 'data-k="r_4_8"' in dom
  assert 'void @r_4_8(' in dom or 'define void @r_4_8(' in dom
  assert 'kernel.reduce max' in dom and '5. kernelize' in dom and 'r_4_8</td><td class="l">#0 @softmax' in dom


def test_tgc_viz_on_a_gpt_training_step_leads_from_the_slowest_kernel_to_its_opts_and_source(tmp_path):
  """examples/gpt_train.py (made small): the page's table names the slowest kernels of the step by median launch
  time; each is a kernel of a function on the page, with its opts, its uops and its source."""
  out = tmp_path / 'gpt.html'
  args = ['--layers', '1', '--d', '16', '--heads', '2', '--seq', '8', '--batch', '2', '--vocab', '16', '--steps', '2']
  assert viz_main([os.path.join(ROOT, 'examples', 'gpt_train.py'), '-o', str(out), '--'] + args) == 0
  data = page.read_data(out.read_text())
  step = max(data['functions'], key=lambda f: len(f['kernels']))
  assert len(step['kernels']) > 50 and any('matmul' in s['text'] for s in step['steps'][:1])
  rows = sorted(data['profile']['table'], key=lambda r: -r['median'])
  for r in rows[:5]:
    f = data['functions'][r['fn']]
    k = next(k for k in f['kernels'] if k['name'] == r['name'])
    assert r['count'] >= 1 and k['opts'] and k['uops'] and f"@{r['name']}(" in k['source'] and k['lines']
    assert f['kernel_profile'][r['name']]['median'] == r['median']
