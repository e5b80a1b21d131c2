"""tgc-opt's exit codes (tools.md): 0 success, 1 a user's mistake (a diagnostic, a bad pass or option, a missing file),
2 a malformed command line (unknown flag, missing value)."""
import subprocess

import pytest

GOOD = 'func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = tensor.neg %x : tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n'
BAD = 'func.func @f(%x: tensor<4xf32>) {\n  %0 = tensor.neg %x : tensor<5xf32>\n  func.return\n}\n'
EXPECTING = 'func.func @f(%x: tensor<4xf32>) {\n  %0 = tensor.neg %x : tensor<5xf32> // expected-error {{does not match}}\n  func.return\n}\n'
WRONG_EXPECTATION = 'func.func @f(%x: tensor<4xf32>) {\n  %0 = tensor.neg %x : tensor<5xf32> // expected-error {{something else}}\n  func.return\n}\n'


def _sub(arg, files):
  for k, v in files.items(): arg = arg.replace('{' + k + '}', v)
  return arg


def run(*args, stdin=None):
  p = subprocess.run(['tgc-opt', *args], input=stdin, capture_output=True, text=True, timeout=60)
  assert 'Traceback' not in p.stderr
  return p.returncode, p.stdout, p.stderr


@pytest.fixture
def files(tmp_path):
  out = {}
  for name, text in (('good', GOOD), ('bad', BAD), ('expecting', EXPECTING), ('wrong', WRONG_EXPECTATION), ('empty', '')):
    p = tmp_path / f'{name}.tgc'
    p.write_text(text)
    out[name] = str(p)
  out['dir'] = str(tmp_path)
  return out


@pytest.mark.parametrize('args', [
  ['{good}'], ['{good}', '-p', 'canonicalize,cse,dce'], ['{good}', '--pass-pipeline=builtin.module(canonicalize)'],
  ['{good}', '--canonicalize', '--cse'], ['{good}', '--print-op-generic'], ['{good}', '--split-input-file'],
  ['{good}', '--timing', '-p', 'cse'], ['{good}', '--pass-statistics', '-p', 'cse'], ['{good}', '--no-verify', '-p', 'dce'],
  ['{good}', '--print-ir-after-all', '-p', 'cse'], ['{good}', '--print-ir-before=cse', '-p', 'cse'],
  ['{expecting}', '--verify-diagnostics'], ['{empty}'], ['--list-passes'], ['--help'], ['{good}', '-o', '{dir}/out.tgc'],
  ['{good}', '-p', 'linearize', '--allow-idle-passes'], ['{good}', '-p', 'kernelize,kernel-opt,linearize'], ['{empty}', '-p', 'linearize'],
])
def test_exit_0(files, args):
  rc, out, err = run(*[_sub(a, files) for a in args])
  assert rc == 0, err


@pytest.mark.parametrize('args,message', [
  (['{bad}'], "error: 'tensor.neg' result tensor<5xf32> does not match operand type tensor<4xf32>"),
  (['{bad}', '--split-input-file'], "error: 'tensor.neg'"),
  (['{wrong}', '--verify-diagnostics'], 'expected error "something else" was not produced'),
  (['{dir}/missing.tgc'], "tgc-opt: error: cannot open"),
  (['{good}', '-p', 'fuse'], "tgc-opt: error: unknown pass 'fuse'"),
  (['{good}', '-p', 'canonicalze'], "(did you mean 'canonicalize'?)"),
  (['{good}', '-p', 'cse{depth=2}'], "pass 'cse' has no option 'depth'"),
  (['{good}', '-p', 'kernel-opt{upcast=many}'], "option 'upcast' of pass 'kernel-opt' expects int, got 'many'"),
  (['{good}', '-p', 'lower-to-uop{noopt=perhaps}'], "option 'noopt' of pass 'lower-to-uop' expects bool"),
  (['{good}', '-p', 'builtin.module(cse'], "unclosed '('"),
  (['{good}', '--print-ir-after=nonsense'], "unknown pass 'nonsense'"),
  (['{good}', '-o', '{dir}/no/such/dir/out.tgc'], "cannot write"),
  (['{good}', '-p', 'linearize'], ":1:1: error: pass 'linearize' works on the kernel level (kernel.func), and the IR here is at the tensor level"),
  (['{good}', '-p', 'autodiff{func=nope}'], ":1:1: error: autodiff: no func.func named '@nope' (functions: @f)"),
  (['{good}', '-p', 'kernelize,uop-simplify'], "error: pass 'uop-simplify' works on the uop level (uop.func), and the IR here is at the kernel level"),
])
def test_exit_1(files, args, message):
  rc, out, err = run(*[_sub(a, files) for a in args])
  assert rc == 1, (rc, err)
  assert message in err


@pytest.mark.parametrize('args', [['--fuse'], ['{good}', '--no-such-flag'], ['{good}', '-o'], ['{good}', '-p'],
                                  ['{good}', '{good}'], ['{good}', '--timing=yes']])
def test_exit_2(files, args):
  rc, out, err = run(*[_sub(a, files) for a in args])
  assert rc == 2, (rc, err)
  assert 'usage: tgc-opt' in err and out == ''


def test_stdin_dash_and_default(files):
  for args in (['-'], []):
    rc, out, err = run(*args, stdin=GOOD)
    assert rc == 0 and out == GOOD, err
  rc, out, err = run('-', stdin=BAD)
  assert rc == 1 and err.startswith('<stdin>:2:3: error:')


def test_output_file_gets_the_result_and_stdout_stays_empty(files):
  rc, out, err = run(files['good'], '-o', files['dir'] + '/o.tgc', '--print-op-generic')
  assert rc == 0 and out == ''
  assert open(files['dir'] + '/o.tgc').read().count('"tensor.neg"(%x)') == 1


def test_the_round_trip_is_a_fixed_point(files):
  rc, once, _ = run(files['good'])
  rc2, twice, _ = run('-', stdin=once)
  assert rc == rc2 == 0 and once == twice == GOOD


def test_diagnostics_go_to_stderr_only(files):
  rc, out, err = run(files['bad'])
  assert rc == 1 and out == '' and err.startswith(files['bad'] + ':2:3: error:')


def test_verify_diagnostics_fails_on_an_unexpected_error(files):
  rc, out, err = run(files['bad'], '--verify-diagnostics')
  assert rc == 1 and 'unexpected error' in err


def test_allow_unregistered_dialect_round_trips(tmp_path):
  text = 'func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = "foo.bar"(%x) {k = 1} : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n'
  p = tmp_path / 'u.tgc'
  p.write_text(text)
  rc, out, err = run(str(p), '--allow-unregistered-dialect')
  assert rc == 0, err
  assert out == text


@pytest.mark.parametrize('tool', ['tgc-opt', 'tgc-translate', 'tgc-run', 'tgc-import-onnx'])
def test_version_on_every_tool(tool):
  import tgc
  p = subprocess.run([tool, '--version'], capture_output=True, text=True, timeout=60)
  assert p.returncode == 0 and p.stdout == f"{tool} {tgc.__version__}\n", (p.stdout, p.stderr)


def test_wheel_metadata_names_licence_and_authors():
  import os, tomllib
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(root, 'pyproject.toml'), 'rb') as f: proj = tomllib.load(f)['project']
  assert proj['license'] == 'MIT' and os.path.exists(os.path.join(root, 'LICENSE'))
  assert proj['authors'] == [{'name': 'tgc developers'}] and proj['dynamic'] == ['version']
  assert 'MIT License' in open(os.path.join(root, 'LICENSE')).read()


def test_idle_passes_warn_and_run_with_the_opt_out(files):
  rc, out, err = run(files['good'], '-p', 'cse,linearize', '--allow-idle-passes')
  assert rc == 0 and "warning: pass 'linearize' works on the kernel level" in err and 'tensor.neg %x' in out


def test_compile_pipelines_take_a_program_with_no_kernel():
  """A PassManager built in code (compile pipelines) reports nothing idle: a function that computes nothing runs
  kernel-opt and linearize on no kernel."""
  import numpy as np
  from tgc.ir import parse
  from tgc.compiler import compile_module
  m = parse('func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}\n')
  np.testing.assert_array_equal(compile_module(m, 'CPU')(np.arange(4, dtype=np.float32))[0], np.arange(4, dtype=np.float32))
