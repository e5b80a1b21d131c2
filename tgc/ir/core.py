"""The IR's objects: values, operations, blocks, modules, and the declarative op definition.

An op is a small class: its name, operand names (a trailing '*' makes one variadic, a '?' optional; an op with
several optional operands names in PRESENT_WITH, for all but its last, the attribute it holds exactly when the
operand is there), attribute kinds, traits, the custom form as a format string, and a `verify`. `__init_subclass__`
registers it and makes its operands and attributes readable as properties.
"""
from __future__ import annotations
from typing import ClassVar, Iterator
from tgc.ir.diagnostics import Diagnostic, Location
from tgc.ir.types import Type
from tgc.ir.attrs import normalize

# ---- traits ----
PURE = 'pure'                  # no side effects: removable when unused, mergeable by cse
COMMUTATIVE = 'commutative'
ELEMENTWISE = 'elementwise'
CONSTANT = 'constant'          # materialises a constant attribute `value`
FUNCTION = 'function'          # has a body block and a symbol name
TERMINATOR = 'terminator'
MOVEMENT = 'movement'          # a tensor movement op: folds into views
SCOPE_OPEN = 'scope_open'      # values defined after it are visible only until its SCOPE_CLOSE (uop ranges, ifs)
SCOPE_CLOSE = 'scope_close'
FORWARD_REFS = 'forward_refs'  # its variadic operands may be defined later in the block (uop.define_acc's ranges)

REGISTRY: dict[str, type[Operation]] = {}
_new_object = object.__new__


class Value:
  """An SSA value: a block argument (owner is the Block) or an op's result."""
  __slots__ = ('type', 'owner', 'index', 'hint')
  def __init__(self, type: Type, owner=None, index: int = 0, hint: str | None = None):
    self.type, self.owner, self.index, self.hint = type, owner, index, hint
  def __repr__(self): return f"<Value %{self.hint or '?'}: {self.type}>"
  @property
  def op(self) -> Operation | None:
    return self.owner if isinstance(self.owner, Operation) else None


class Block:
  __slots__ = ('args', 'ops', 'parent')
  def __init__(self, args: list[Value] | None = None, ops: list[Operation] | None = None):
    self.args, self.ops, self.parent = args or [], ops or [], None
    for i, a in enumerate(self.args): a.owner, a.index = self, i
  def __iter__(self) -> Iterator[Operation]: return iter(self.ops)


class Operation:
  __slots__ = ('operands', 'results', 'attrs', 'body', 'loc')
  name: ClassVar[str] = ''
  OPERANDS: ClassVar[tuple[str, ...]] = ()
  RESULTS: ClassVar[int] = 1
  ATTRS: ClassVar[dict[str, str]] = {}     # attribute name -> kind (see tgc.ir.attrs)
  PRESENT_WITH: ClassVar[dict[str, str]] = {}  # optional operand -> the attribute present exactly when it is
  TRAITS: ClassVar[frozenset[str]] = frozenset()
  ADDRESSES: ClassVar[tuple[tuple[int, int], ...]] = ()  # (pointer, index) operand positions of the memory it reads or writes
  FORMAT: ClassVar[str | None] = None      # custom form; None: region ops print themselves
  _fmt: ClassVar[object] = None             # the compiled FORMAT (tgc.ir.format)

  def __init_subclass__(cls, **kw):
    super().__init_subclass__(**kw)
    if isinstance(cls.TRAITS, (set, tuple, list)): cls.TRAITS = frozenset(cls.TRAITS)
    names = [n.rstrip('*?') for n in cls.OPERANDS]
    kinds = [n[-1] if n[-1] in '*?' else '' for n in cls.OPERANDS]
    cls._variadic = next((i for i, (n, k) in enumerate(zip(names, kinds)) if k and n not in cls.PRESENT_WITH), None)
    for i, (n, k) in enumerate(zip(names, kinds)):
      if n in cls.__dict__: continue
      if cls.PRESENT_WITH:  # (operands after a marked one move with its presence: found through the groups)
        setattr(cls, n, property(_grouped_getter(n, k)))
      else: setattr(cls, n, property(_operand_getter(cls, i, k)))
    for a in cls.ATTRS:
      if a not in cls.__dict__: setattr(cls, a, property(lambda self, a=a: self.attrs.get(a)))
    if cls.name:
      REGISTRY[cls.name] = cls
      cls._fmt = None

  def __init__(self, operands=(), result_types=(), attrs=None, loc: Location | None = None, body: Block | None = None):
    self.operands = list(operands)
    self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
    self.attrs = {k: normalize(self.ATTRS.get(k, 'any'), v) for k, v in attrs.items()} if attrs else {}
    self.loc, self.body = loc, body
    if body is not None: body.parent = self

  @classmethod
  def _new(cls, operands: list, result_types, attrs: dict, loc: Location | None):
    """The parser's constructor: `attrs` are already normalised (normalize is idempotent) and `operands`
    is a fresh list the op may keep; no body."""
    self = _new_object(cls)
    self.operands = operands
    self.results = [Value(result_types[0], self, 0)] if len(result_types) == 1 else [Value(t, self, i) for i, t in enumerate(result_types)]
    self.attrs, self.loc, self.body = attrs, loc, None
    return self

  @property
  def result(self) -> Value:
    return self.results[0]
  @property
  def dialect(self) -> str: return self.name.split('.', 1)[0]
  def has(self, trait: str) -> bool: return trait in self.TRAITS
  def error(self, msg: str) -> Diagnostic: return Diagnostic(f"'{self.name}' {msg}", self.loc)
  def verify(self) -> None:
    """Raise self.error(...) when the op breaks a rule of its dialect. Counts are checked before this."""

  def walk(self) -> Iterator[Operation]:
    """This op and every op nested in it, in order."""
    yield self
    if self.body is not None:
      for op in self.body.ops: yield from op.walk()

  def operand_groups(self) -> dict[str, list[Value]]:
    """Operand name -> the values it binds (one, or several for a variadic/optional one)."""
    n, v, out = len(self.OPERANDS), self._variadic, {}
    marked = {name: int(attr in self.attrs) for name, attr in self.PRESENT_WITH.items()}
    extra = len(self.operands) - (n - 1 - len(marked) + sum(marked.values())) if v is not None else 0
    i = 0
    for j, name in enumerate(self.OPERANDS):
      base = name.rstrip('*?')
      k = extra if j == v else marked.get(base, 1)
      out[base] = self.operands[i:i + k]
      i += k
    return out

  def __repr__(self): return f"<{self.name} at {self.loc}>"
  def __str__(self):
    from tgc.ir.printer import Printer
    return Printer().print_op_text(self)


def _grouped_getter(name, kind):
  if kind == '*': return lambda self: self.operand_groups()[name]
  def get(self):
    g = self.operand_groups()[name]
    return g[0] if g else None
  return get

def _operand_getter(cls, i, kind):
  n = len(cls.OPERANDS)
  if kind == '':
    if cls._variadic is not None and i > cls._variadic:
      off = n - i
      return lambda self: self.operands[len(self.operands) - off]
    return lambda self: self.operands[i]
  tail = n - 1 - i
  if kind == '?': return lambda self: self.operands[i] if len(self.operands) > n - 1 else None
  return lambda self: self.operands[i:len(self.operands) - tail]


class Module:
  """A list of top-level ops (functions and kernels)."""
  def __init__(self, ops: list[Operation] | None = None, source=None):
    self.body = Block([], ops or [])
    self.source = source
  @property
  def ops(self) -> list[Operation]: return self.body.ops
  def walk(self) -> Iterator[Operation]:
    for op in self.body.ops: yield from op.walk()
  def lookup(self, sym: str) -> Operation | None:
    for op in self.body.ops:
      if op.has(FUNCTION) and op.attrs.get('sym_name') == sym: return op
    return None
  def functions(self, name: str | None = None) -> list[Operation]:
    return [op for op in self.body.ops if op.has(FUNCTION) and (name is None or op.name == name)]
  def print(self, generic: bool = False) -> str:
    from tgc.ir.printer import Printer
    return Printer(generic=generic).print_module(self)
  def __str__(self): return self.print()
  def verify(self) -> None:
    from tgc.ir.verifier import verify
    verify(self)
  def clone(self) -> Module:
    from tgc.ir.rewrite import clone_module
    return clone_module(self)


def lookup_op(name: str) -> type[Operation] | None:
  if name not in REGISTRY: load_dialects()
  return REGISTRY.get(name)

# the modules whose import registers the dialects' ops, and the "module:function" that parses text into a Module:
# filled where the package is entered (tgc/__init__.py), so that the IR core imports no dialect and no parser (they
# import it)
DIALECT_MODULES: list[str] = []
PARSER: str = ''

_loaded = False
def load_dialects():
  """Import every dialect module once (DIALECT_MODULES), which registers its ops."""
  global _loaded
  if _loaded: return
  _loaded = True
  import importlib
  for mod in DIALECT_MODULES: importlib.import_module(mod)
