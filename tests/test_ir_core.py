"""The IR core from Python: types and parse_type, attribute kinds, building ops by hand, printing, verifying."""
import re

import pytest

import tgc.ir as ir
from tgc.ir import dtypes as D
from tgc.ir.attrs import AttrError, HexInt, Ident, Record, Symbol, fmt_value, normalize
from tgc.ir.core import Block, Module, Value, lookup_op, PURE, COMMUTATIVE, CONSTANT, MOVEMENT, FUNCTION
from tgc.ir.diagnostics import Diagnostic, DiagnosticList
from tgc.ir.types import BufType, PtrType, TensorType, VecType, elem, parse_type


# ---------------------------------------------------------------- types

@pytest.mark.parametrize('text', ['i1', 'i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'f16', 'bf16', 'f32', 'f64', 'f8e4m3', 'f8e5m2', 'f8e4m3fnuz', 'f8e5m2fnuz', 'i4', 'u4', 'i2', 'u2'])
def test_element_types_parse_and_print(text):
  t = parse_type(text)
  assert t is D.BY_NAME[text]
  assert str(t) == text


@pytest.mark.parametrize('text,cls,shape', [
  ('tensor<4x4xf32>', TensorType, (4, 4)), ('tensor<f32>', TensorType, ()), ('tensor<1x2x3x4xi8>', TensorType, (1, 2, 3, 4)),
  ('tensor<0x3xf32>', TensorType, (0, 3)), ('!kernel.buf<16xu8>', BufType, (16,)), ('!kernel.buf<bf16>', BufType, ())])
def test_shaped_types(text, cls, shape):
  t = parse_type(text)
  assert isinstance(t, cls) and t.shape == shape
  assert str(t) == text
  assert parse_type(str(t)) == t


def test_vector_and_pointer_types():
  v = parse_type('vec<4xf32>')
  assert v == VecType(4, D.f32) and str(v) == 'vec<4xf32>' and elem(v) is D.f32
  p = parse_type('!uop.ptr<i32>')
  assert p == PtrType(D.i32) and not p.local and str(p) == '!uop.ptr<i32>'
  q = parse_type('!uop.ptr<f16, local>')
  assert q == PtrType(D.f16, True) and str(q) == '!uop.ptr<f16, local>'
  assert p != q


@pytest.mark.parametrize('bad', ['tensor<4xf33>', 'f31', 'tensor<?xf32>', 'tensor<4x>', 'vec<2x2xf32>', 'vec<0xf32>', 'vec<f32>',
                                 '!uop.ptr<tensor<4xf32>>', '!kernel.buff<4xf32>', 'tensor<-1xf32>', '', 'tensor<4xf32'])
def test_parse_type_rejects(bad):
  with pytest.raises(ValueError):
    parse_type(bad)


def test_type_properties():
  t = parse_type('tensor<2x3x4xi16>')
  assert t.numel == 24 and t.rank == 3
  assert t.with_dtype(D.f32) == parse_type('tensor<2x3x4xf32>')
  assert parse_type('tensor<f32>').numel == 1 and parse_type('tensor<f32>').rank == 0
  assert parse_type('!kernel.buf<3x5xf32>').numel == 15
  # interned by value: equal text gives equal (hashable) types
  assert hash(parse_type('tensor<4xf32>')) == hash(TensorType((4,), D.f32))


def test_dtype_properties():
  assert D.bool_.bits == 1 and D.bool_.is_bool and not D.bool_.is_int
  assert D.i8.is_signed and D.u8.is_int and not D.u8.is_signed
  assert D.bf16.is_float and D.bf16.bits == 16 and D.f64.itemsize == 8
  assert D.min_max(D.i8) == (-128, 127) and D.min_max(D.u16) == (0, 65535) and D.min_max(D.bool_) == (0, 1)
  assert D.from_numpy('int32') is D.i32 and D.from_numpy('float16') is D.f16
  import pickle
  assert pickle.loads(pickle.dumps(D.bf16)) is D.bf16


# ---------------------------------------------------------------- attributes

def test_normalize_kinds():
  assert normalize('int', 3) == 3
  assert normalize('ints', [1, 0]) == (1, 0)
  assert normalize('pairs', [(0, 1), (2, 0)]) == ((0, 1), (2, 0))
  assert normalize('dense', [[1, 2], [3, 4]]) == ((1, 2), (3, 4))
  assert normalize('dense', Ident('true')) == 1
  assert normalize('number', 2.5) == 2.5
  assert isinstance(normalize('number', HexInt(0x7f800000)), HexInt)
  assert isinstance(normalize('symbol', 'f'), Symbol)
  assert normalize('ident', Ident('add')) == 'add'
  # stored forms are hashable, for cse
  hash(normalize('pairs', [[0, 1]])); hash(normalize('dense', [[1.5]]))


@pytest.mark.parametrize('kind,value', [('int', 1.5), ('int', 'x'), ('ints', [1, 2.5]), ('ints', 3), ('pairs', [(1, 2, 3)]),
                                        ('pairs', [1, 2]), ('number', 'x'), ('dense', ['a']), ('symbol', 3), ('records', [1])])
def test_normalize_rejects(kind, value):
  with pytest.raises(AttrError):
    normalize(kind, value)


def test_fmt_value():
  assert fmt_value(2.5) == '2.5'
  assert fmt_value(float('inf')) == 'inf' and fmt_value(float('-inf')) == '-inf' and fmt_value(float('nan')) == 'nan'
  assert fmt_value(HexInt(0x7f800000)) == '0x7f800000'
  assert fmt_value(Symbol('k')) == '@k'
  assert fmt_value('a "q"') == '"a \\"q\\""'
  assert fmt_value((1, (2, 3))) == '[1, [2, 3]]'
  assert fmt_value(True) == 'true'
  assert fmt_value(Record('upcast', {'axis': 0, 'amount': 4})) == 'upcast(axis = 0, amount = 4)'
  # a float that is integral keeps its point, so it parses back as a float
  assert fmt_value(3.0) == '3.0'


# ---------------------------------------------------------------- building ops in Python

T4 = parse_type('tensor<4xf32>')

def _func(name, args, ops, results=None):
  Func = lookup_op('func.func')
  attrs = {'sym_name': name}
  if results is not None: attrs['result_types'] = tuple(results)
  return Func([], [], attrs, body=Block(args, ops))

def test_build_and_print_module():
  Add, Neg, Ret, Const = (lookup_op(n) for n in ('tensor.add', 'tensor.neg', 'func.return', 'tensor.const'))
  a, b = Value(T4, hint='a'), Value(T4, hint='b')
  c = Const([], [T4], {'value': 2.5})
  s = Add([a, c.result], [T4])
  n = Neg([s.result], [T4])
  ret = Ret([n.result, b], [])
  m = Module([_func('f', [a, b], [c, s, n, ret], [T4, T4])])
  m.verify()
  assert m.print() == (
    'func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {\n'
    '  %0 = tensor.const 2.5 : tensor<4xf32>\n'
    '  %1 = tensor.add %a, %0 : tensor<4xf32>\n'
    '  %2 = tensor.neg %1 : tensor<4xf32>\n'
    '  func.return %2, %b : tensor<4xf32>, tensor<4xf32>\n'
    '}\n')
  assert '"tensor.add"(%a, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>' in m.print(generic=True)
  # what is built prints text that parses back to the same text
  assert ir.parse(m.print()).print() == m.print()
  assert ir.parse(m.print(generic=True)).print() == m.print()


def test_build_movement_and_reduce():
  X = parse_type('tensor<4x8xf32>')
  x = Value(X, hint='x')
  Permute, Reduce, Pad = lookup_op('tensor.permute'), lookup_op('tensor.reduce'), lookup_op('tensor.pad')
  p = Permute([x], [parse_type('tensor<8x4xf32>')], {'order': [1, 0]})
  r = Reduce([p.result], [parse_type('tensor<8x1xf32>')], {'kind': Ident('add'), 'axes': [1]})
  q = Pad([r.result], [parse_type('tensor<9x3xf32>')], {'pads': [(0, 1), (1, 1)]})
  Ret = lookup_op('func.return')
  m = Module([_func('g', [x], [p, r, q, Ret([q.result], [])], [q.result.type])])
  m.verify()
  text = m.print()
  assert '%0 = tensor.permute %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>' in text
  assert '%1 = tensor.reduce add %0 [1] : tensor<8x4xf32> -> tensor<8x1xf32>' in text
  assert '%2 = tensor.pad %1 [(0, 1), (1, 1)] : tensor<8x1xf32> -> tensor<9x3xf32>' in text
  assert p.order == (1, 0) and r.kind == 'add' and r.axes == (1,) and q.src is r.result


def test_operand_accessors_and_traits():
  Add, Where, Ret = lookup_op('tensor.add'), lookup_op('tensor.where'), lookup_op('func.return')
  a, b = Value(T4), Value(T4)
  op = Add([a, b], [T4])
  assert op.lhs is a and op.rhs is b and op.dialect == 'tensor'
  assert op.has(PURE) and op.has(COMMUTATIVE) and not lookup_op('tensor.sub').TRAITS & {COMMUTATIVE}
  assert lookup_op('tensor.const').TRAITS >= {PURE, CONSTANT} and MOVEMENT in lookup_op('tensor.reshape').TRAITS
  assert PURE not in lookup_op('tensor.contiguous').TRAITS and FUNCTION in lookup_op('kernel.func').TRAITS
  c = Value(parse_type('tensor<4xi1>'))
  w = Where([c, a, b], [T4])
  assert (w.cond, w.true_value, w.false_value) == (c, a, b)
  r = Ret([a, b], [])
  assert r.values == [a, b] and r.operand_groups() == {'values': [a, b]}
  Load = lookup_op('uop.load')
  assert Load.OPERANDS == ('buf', 'idx', 'gated*')


def test_every_dialect_is_registered():
  names = set(ir.REGISTRY)
  lookup_op('tensor.add')
  names = set(ir.REGISTRY)
  for d in ('tensor', 'kernel', 'uop'):
    for n in ('add', 'sub', 'mul', 'fdiv', 'idiv', 'mod', 'max', 'min', 'and', 'or', 'xor', 'shl', 'shr', 'neg', 'exp2', 'log2',
              'sin', 'sqrt', 'recip', 'trunc', 'not', 'cmplt', 'cmpne', 'cmpeq', 'where', 'mulacc', 'cast', 'bitcast', 'const'):
      assert f'{d}.{n}' in names, f'{d}.{n}'
  for n in ('tensor.empty', 'tensor.reduce', 'tensor.reshape', 'tensor.expand', 'tensor.permute', 'tensor.pad', 'tensor.shrink',
            'tensor.flip', 'tensor.contiguous', 'tensor.matmul', 'kernel.func', 'kernel.load', 'kernel.store', 'kernel.reduce',
            'kernel.alloc', 'kernel.launch', 'uop.func', 'uop.define_global', 'uop.define_local', 'uop.define_var', 'uop.special',
            'uop.define_acc', 'uop.range', 'uop.endrange', 'uop.load', 'uop.store', 'uop.phi', 'uop.if', 'uop.endif', 'uop.barrier',
            'uop.vectorize', 'uop.gep', 'uop.wmma', 'func.func', 'func.return'):
    assert n in names, n
  assert lookup_op('tensor.frobnicate') is None


# ---------------------------------------------------------------- the verifier, from Python

def _messages(m):
  with pytest.raises((Diagnostic, DiagnosticList)) as e:
    m.verify()
  err = e.value
  return [d.message for d in (err.diags if isinstance(err, DiagnosticList) else [err])]

def test_verifier_shape_error_from_python():
  Add, Ret = lookup_op('tensor.add'), lookup_op('func.return')
  a, b = Value(T4, hint='a'), Value(parse_type('tensor<5xf32>'), hint='b')
  add = Add([a, b], [T4])
  msgs = _messages(Module([_func('f', [a, b], [add, Ret([], [])])]))
  assert msgs == ["'tensor.add' operands have different shapes: tensor<4xf32> and tensor<5xf32>"]

def test_verifier_collects_every_error_in_order():
  Neg, Exp, Ret = lookup_op('tensor.neg'), lookup_op('tensor.exp2'), lookup_op('func.return')
  x = Value(parse_type('tensor<4xi32>'), hint='x')
  bad1 = Exp([x], [x.type])                       # exp2 on ints
  bad2 = Neg([x], [T4])                           # result type differs
  msgs = _messages(Module([_func('f', [x], [bad1, bad2, Ret([], [])])]))
  assert len(msgs) == 2
  assert 'requires a float type' in msgs[0] and 'does not match operand type' in msgs[1]

def test_verifier_operand_count_and_missing_attribute():
  Add, Permute, Ret = lookup_op('tensor.add'), lookup_op('tensor.permute'), lookup_op('func.return')
  a = Value(T4, hint='a')
  msgs = _messages(Module([_func('f', [a], [Add([a], [T4]), Permute([a], [T4]), Ret([], [])])]))
  assert msgs == ["'tensor.add' expects 2 operands, got 1", "'tensor.permute' requires attribute 'order'"]

def test_verifier_use_of_value_from_another_function():
  Neg, Ret = lookup_op('tensor.neg'), lookup_op('func.return')
  a = Value(T4, hint='a')
  n = Neg([a], [T4])
  f = _func('f', [a], [n, Ret([], [])])
  b = Value(T4, hint='b')
  g = _func('g', [b], [Ret([n.result], [])], [T4])  # uses f's value
  msgs = _messages(Module([f, g]))
  assert msgs == ["'func.return' operand #0 does not dominate this use: it is not defined in this function"]

def test_verifier_symbol_redefinition_has_note():
  Ret = lookup_op('func.return')
  m = Module([_func('f', [], [Ret([], [])]), _func('f', [], [Ret([], [])])])
  with pytest.raises(DiagnosticList) as e:
    m.verify()
  d = e.value.diags[0]
  assert d.message == "redefinition of symbol '@f'" and [n.message for n in d.notes] == ['previous definition is here']

def test_parse_errors_are_all_diagnostics():
  # api.md: ir.parse raises tgc.Diagnostic; the verifier's several errors at once are one too
  import tgc
  text = 'func.func @f(%a: tensor<4xi32>) {\n  %0 = tensor.exp2 %a : tensor<4xi32>\n  %1 = tensor.neg %a : tensor<4xf32>\n  func.return\n}\n'
  with pytest.raises(tgc.Diagnostic) as e: ir.parse(text, 'x.tgc')
  err = e.value
  assert isinstance(err, DiagnosticList) and len(err.diags) == 2
  assert (err.loc.line, err.message) == (2, err.diags[0].message)  # the first error's place and message
  assert [n.loc.line for n in err.all()] == [2, 3]
  assert re.findall(r'^x\.tgc:(\d):3: error:', str(err), re.M) == ['2', '3']
  with pytest.raises(tgc.Diagnostic): ir.parse('func.func @f() {\n  %0 = tensor.add %b, %b : tensor<4xf32>\n}\n')

def test_diagnostic_without_location_names_the_tool():
  d = Diagnostic('something is wrong')
  assert d.format('tgc-opt') == 'tgc-opt: error: something is wrong'

def test_diagnostic_with_location_quotes_source_and_caret():
  m_text = 'func.func @f(%a: tensor<4xf32>) {\n  %0 = tensor.neg %a : tensor<4xi32>\n  func.return\n}\n'
  with pytest.raises((Diagnostic, DiagnosticList)) as e:
    ir.parse(m_text, 'x.tgc')
  d = e.value.diags[0] if isinstance(e.value, DiagnosticList) else e.value
  lines = d.format().split('\n')
  assert re.match(r"x\.tgc:2:3: error: 'tensor\.neg' ", lines[0])
  assert lines[1] == '  %0 = tensor.neg %a : tensor<4xi32>'
  assert lines[2] == '  ^'


def test_clone_module_is_deep_and_prints_the_same():
  text = ('func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = tensor.neg %a : tensor<4xf32>\n'
          '  %1 = tensor.add %0, %a : tensor<4xf32>\n  func.return %1 : tensor<4xf32>\n}\n')
  m = ir.parse(text)
  c = m.clone()
  assert c.print() == m.print() == text
  c.ops[0].body.ops.pop(0)
  assert m.print() == text  # the original is untouched


def test_printed_lines_have_no_trailing_whitespace():
  m = ir.parse('func.func @f() {\n  func.return\n}\n')
  assert all(line == line.rstrip() for line in m.print().split('\n'))
