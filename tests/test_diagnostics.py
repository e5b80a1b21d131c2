"""Malformed input of every kind through the tgc-opt command line: each gives `file:line:col: error:`, the source
line and a caret on stderr, exit code 1, never a Python traceback, and finishes within a few seconds."""
import os
import random
import re
import subprocess
import sys
import time

import pytest

TIMEOUT = 20          # a hang fails the test instead of the suite
FAST = 5.0            # seconds a diagnostic may take, start-up included

def tgc_opt(path, *args, stdin=None):
  t0 = time.perf_counter()
  p = subprocess.run(['tgc-opt', path, *args],
                     input=stdin, capture_output=True, timeout=TIMEOUT)
  return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace'), time.perf_counter() - t0


def write(tmp_path, data, name='bad.tgc'):
  p = tmp_path / name
  p.write_bytes(data if isinstance(data, bytes) else data.encode())
  return str(p)


def assert_located(rc, out, err, dt, path, line=None, col=None, message=None):
  """exit 1; the first line is `path:line:col: error: ...`; a source line and a caret follow (when the line is not blank)."""
  assert rc == 1, (rc, err)
  assert 'Traceback' not in err and 'Traceback' not in out
  assert 'internal error' not in err
  assert dt < FAST, f'took {dt:.1f}s'
  first = err.split('\n')[0]
  m = re.match(rf'{re.escape(path)}:(\d+):(\d+): error: (.+)$', first)
  assert m, err[:500]
  if line is not None: assert int(m.group(1)) == line, first
  if col is not None: assert int(m.group(2)) == col, first
  if message is not None: assert message in m.group(3), first
  lines = err.split('\n')
  if len(lines) > 2 and lines[1].strip():
    caret = lines[2]
    assert caret.strip() == '^', err[:500]
    assert len(caret) - 1 == int(m.group(2)) - 1, 'the caret stands under the column'
  return int(m.group(1)), int(m.group(2)), m.group(3)


# ---------------------------------------------------------------- each kind of mistake, at its place

CASES = {
  'syntax_missing_operand': ('func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.add %a, : tensor<4xf32>\n  func.return\n}\n', 2, 23, "got ':'"),
  'syntax_stray_brace': ('func.func @f() {\n  func.return }\n}\n', 2, 15, 'expected'),
  'syntax_bad_character': ('func.func @f() {\n  func.return ?\n}\n', 2, 15, "unexpected character '?'"),
  'syntax_unterminated_function': ('func.func @f() {\n  func.return\n', None, None, 'end of input'),
  'syntax_unterminated_string': ('func.func @f() {\n  %0 = tensor.const "abc : tensor<f32>\n  func.return\n}\n', 2, None, 'unexpected character'),
  'unknown_op': ('func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.frob %a : tensor<4xf32>\n  func.return\n}\n', 2, 8, "unregistered operation 'tensor.frob'"),
  'unknown_dialect_generic': ('func.func @f() {\n  "foo.bar"() : () -> ()\n  func.return\n}\n', 2, 3, "unregistered operation 'foo.bar'"),
  'unknown_type': ('func.func @f(%a: tensor<4xf99>) {\n  func.return\n}\n', 1, 18, "unknown type 'tensor<4xf99>'"),
  'shape_error': ('func.func @f(%a: tensor<4xf32>, %b: tensor<5xf32>) {\n  %0 = tensor.add %a, %b : tensor<4xf32>\n  func.return\n}\n',
                  2, 3, "'tensor.add' operands have different shapes: tensor<4xf32> and tensor<5xf32>"),
  'type_error': ('func.func @f(%a: tensor<4xi32>) {\n  %0 = tensor.sqrt %a : tensor<4xi32>\n  func.return\n}\n', 2, 3, 'requires a float type'),
  'reduce_axis': ('func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.reduce add %a [3] : tensor<4xf32> -> tensor<1xf32>\n  func.return\n}\n',
                  2, 3, 'axis 3 is out of range'),
  'undefined_value': ('func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %zz : tensor<4xf32>\n  func.return\n}\n', 2, 19, "use of undeclared SSA value '%zz'"),
  'redefined_value': ('func.func @f(%a: tensor<4xf32>) {\n  %a = tensor.neg %a : tensor<4xf32>\n  func.return\n}\n', 2, 3, "redefinition of SSA value '%a'"),
  'use_before_def': ('func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %1 : tensor<4xf32>\n  %1 = tensor.neg %a : tensor<4xf32>\n  func.return\n}\n',
                     2, 3, 'does not dominate'),
  'symbol_redefined': ('func.func @f() {\n  func.return\n}\nfunc.func @f() {\n  func.return\n}\n', 4, 1, "redefinition of symbol '@f'"),
  'missing_return': ('func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %a : tensor<4xf32>\n}\n', 1, 1, "must end with 'func.return'"),
  'const_out_of_range': ('func.func @f() {\n  %0 = tensor.const 999 : tensor<i8>\n  func.return\n}\n', 2, 3, 'out of range for i8'),
  'bad_view': ('kernel.func @k(%d: !kernel.buf<4xf32>) {\n  %c = kernel.const 1.0 : f32\n'
               '  kernel.store %d [view(shape = [5], strides = [1], offset = 0)], %c : f32\n}\n', 3, 3, 'outside !kernel.buf<4xf32>'),
  'unclosed_range': ('uop.func @u() {\n  %0 = uop.const 0 : i32\n  %1 = uop.range %0, %0 : i32\n}\n', 3, 3, 'is never closed'),
  'top_level_op': ('%0 = tensor.empty : tensor<4xf32>\n', 1, 1, 'not allowed at the top level'),
}

@pytest.mark.parametrize('name', sorted(CASES))
def test_malformed_input_is_located(tmp_path, name):
  text, line, col, msg = CASES[name]
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, line, col, msg)
  assert out == ''


def test_redefinition_note_follows_the_error(tmp_path):
  path = write(tmp_path, 'func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %a : tensor<4xf32>\n  %0 = tensor.neg %a : tensor<4xf32>\n  func.return\n}\n')
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 3, 3, "redefinition of SSA value '%0'")
  assert f'{path}:2:3: note: previous definition is here' in err


def test_every_verifier_error_is_reported_not_only_the_first(tmp_path):
  path = write(tmp_path, 'func.func @f(%a: tensor<4xi32>) {\n  %0 = tensor.sqrt %a : tensor<4xi32>\n  %1 = tensor.exp2 %a : tensor<4xi32>\n  func.return\n}\n')
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2, 3)
  assert f'{path}:3:3: error: ' in err


def test_stdin_is_named_stdin():
  rc, out, err = (lambda p: (p.returncode, p.stdout.decode(), p.stderr.decode()))(
    subprocess.run(['tgc-opt', '-'], input=b'func.func @f() {\n  func.return ?\n}\n', capture_output=True, timeout=TIMEOUT))
  assert rc == 1 and err.startswith('<stdin>:2:15: error: ') and 'Traceback' not in err


# ---------------------------------------------------------------- hostile bytes

def test_invalid_utf8(tmp_path):
  path = write(tmp_path, b'func.func @f() {\n  func.return \xff\xfe\n}\n')
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2, 15, 'invalid UTF-8 byte 0xff')


def test_nul_byte(tmp_path):
  path = write(tmp_path, b'func.func @f() {\n\n  func.return\x00\n}\n')
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 3, None, 'NUL')


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes(tmp_path, seed):
  rng = random.Random(seed)
  data = bytes(rng.randrange(256) for _ in range(rng.choice([64, 4096])))
  path = write(tmp_path, data)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path)


@pytest.mark.parametrize("seed", range(4))
def test_random_ascii_soup(tmp_path, seed):
  """Printable text made of the IR's own tokens, shuffled: a syntax error somewhere, never a crash."""
  rng = random.Random(seed)
  toks = ['func.func', '@f', '(', ')', '{', '}', '%a', ':', 'tensor<4xf32>', '=', 'tensor.add', ',', '->', '[', ']', '0', '1.5',
          '\n', 'func.return', '"s"', 'loc("x":1:1)', 'view(', 'module', '// c\n', '0x7f', 'attributes', 'i32']
  text = ' '.join(rng.choice(toks) for _ in range(200))
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path)


def test_deeply_nested_list(tmp_path):
  depth = 10_000
  text = 'func.func @f() {\n  %0 = tensor.const ' + '[' * depth + '1' + ']' * depth + ' : tensor<1xf32>\n  func.return\n}\n'
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2, None, 'nesting deeper than')


def test_deeply_nested_parentheses(tmp_path):
  depth = 10_000
  text = 'func.func @f() {\n  %0 = tensor.pad %x ' + '(' * depth + ')' * depth + ' : tensor<1xf32> -> tensor<1xf32>\n  func.return\n}\n'
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2)


def test_many_nested_modules(tmp_path):
  text = 'module {\n' * 5000 + '}\n' * 5000
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path)


def test_huge_line(tmp_path):
  """A 1 MB token on one line: located, quoted, and quick."""
  text = 'func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %' + 'v' * 1_000_000 + ' : tensor<4xf32>\n  func.return\n}\n'
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2, 19, 'use of undeclared SSA value')


def test_long_line_of_many_tokens(tmp_path):
  """20,000 list items on one line, with a syntax error at its end."""
  text = 'func.func @f() {\n  %0 = tensor.const ' + '1, ' * 20_000 + ' : tensor<4xf32>\n  func.return\n}\n'
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2, 22 + 3 * 20_000, "got ':'")


def test_huge_line_of_garbage(tmp_path):
  path = write(tmp_path, '#' * 2_000_000)
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 1, 1, "unexpected character '#'")


def test_empty_file_is_an_empty_module(tmp_path):
  path = write(tmp_path, b'')
  rc, out, err, dt = tgc_opt(path)
  assert (rc, out, err) == (0, '', '')


def test_only_comments_and_blank_lines_is_an_empty_module(tmp_path):
  path = write(tmp_path, '\n// a comment\n\n   \n// -----\n')
  rc, out, err, dt = tgc_opt(path)
  assert (rc, out, err) == (0, '', '')


def test_duplicate_attribute_is_located_at_its_op(tmp_path):
  path = write(tmp_path, 'func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %a {k = 1, k = 2} : tensor<4xf32>\n  func.return\n}\n')
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 2, None, "duplicate attribute 'k'")


def test_ssa_value_in_an_attribute_is_located(tmp_path):
  # (it parsed, and printed as a Python object that did not parse back: fuzz.mutate found it)
  path = write(tmp_path, 'func.func @f(%a: tensor<4xf32>) attributes {opts = [upcast(axis = 0, amt = %a)]} {\n  func.return\n}\n')
  rc, out, err, dt = tgc_opt(path)
  assert_located(rc, out, err, dt, path, 1, 76, "attribute 'amt' holds the SSA value %a: attributes are constants")


def test_errors_under_split_input_file_use_whole_file_lines(tmp_path):
  text = ('func.func @a() {\n  func.return\n}\n// -----\nfunc.func @b() {\n  func.return\n}\n// -----\n'
          'func.func @c(%x: tensor<4xf32>) {\n  %0 = tensor.neg %x : tensor<5xf32>\n  func.return\n}\n')
  path = write(tmp_path, text)
  rc, out, err, dt = tgc_opt(path, '--split-input-file')
  assert_located(rc, out, err, dt, path, 10, 3, "'tensor.neg'")
  assert '@a' in out and '@b' in out and '@c' not in out
