"""The graphs a person looks at: a function's kernel graph (kernels as nodes, buffers as edges) or its tensor graph
(ops as nodes, values as edges), as Graphviz DOT (`tgc-opt --view-graph`, after MLIR's -view-op-graph) and as a
layered layout the viewer draws in SVG.

A Graph is plain data: nodes (id, label, kind, detail) and edges (src, dst, label, shape, dtype, bytes), in the
order of the function's ops, which is a topological order.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from tgc.ir.core import Module, Operation
from tgc.ir.printer import Printer
from tgc.ir.types import TensorType
from tgc.dialects.builtin import written_args as kernel_written_args


@dataclass
class Node:
  id: str
  label: str
  kind: str          # input, output, const, kernel, op
  detail: str = ''   # a second line (a kernel's launch grid, an op's result type)
  line: int = 0      # an op's line in its input (its location): the viewer finds the kernel that computes it


@dataclass
class Edge:
  src: str
  dst: str
  value: str         # the SSA name of the value (a buffer) it carries
  type: str
  shape: tuple = ()
  dtype: str = ''
  bytes: int = 0


@dataclass
class Graph:
  name: str
  nodes: list[Node] = field(default_factory=list)
  edges: list[Edge] = field(default_factory=list)

  def to_json(self) -> dict:
    return {'name': self.name, 'nodes': [vars(n) for n in self.nodes], 'edges': [{**vars(e), 'shape': list(e.shape)} for e in self.edges]}


def value_names(fn: Operation) -> dict:
  """The SSA names the printer gives the values of a function (arguments, then results in order)."""
  p = Printer()
  for a in fn.body.args: p.define(a)
  for o in fn.body.ops:
    for r in o.results: p.define(r)
  return p.names


def _edge(src: str, dst: str, name: str, t) -> Edge:
  if isinstance(t, TensorType):
    return Edge(src, dst, name, str(t), tuple(t.shape), t.dtype.name, t.numel * t.dtype.itemsize)
  return Edge(src, dst, name, str(t))


def written_args(m: Module, callee: str) -> set[int]:
  """The argument numbers a kernel writes (tgc.dialects.builtin.written_args; an unknown kernel: its first)."""
  k = m.lookup(callee)
  return {0} if k is None else kernel_written_args(k)


def kernel_detail(k: Operation | None) -> str:
  """A kernel node's second line: a uop function's launch grid; a kernel function's ops (what it fused) and opts."""
  if k is None: return ''
  if k.name == 'uop.func':
    gs, ls = k.attrs.get('global_size', ()), k.attrs.get('local_size', ())
    return f"global {list(gs)} local {list(ls)}" if gs else ''
  ops = list(dict.fromkeys(o.name.split('.', 1)[1] + (' ' + o.attrs['kind'] if o.name == 'kernel.reduce' else '')
                           for o in k.body.ops if o.name not in ('kernel.load', 'kernel.store', 'kernel.const')))
  s = ', '.join(ops[:6]) + (', ...' if len(ops) > 6 else '')
  opts = k.attrs.get('opts')
  return s + (f" [{len(opts)} opts]" if opts else '')


def _start(fn: Operation) -> tuple[Graph, dict, dict]:
  """A function's graph with its arguments as input nodes; the value names and each value's making node so far."""
  names = value_names(fn)
  g = Graph(fn.attrs['sym_name'])
  maker: dict = {}
  for i, a in enumerate(fn.body.args):
    g.nodes.append(Node(f"arg{i}", names[a], 'input', str(a.type))); maker[a] = f"arg{i}"
  return g, names, maker


def kernel_graph(m: Module, fn: Operation) -> Graph:
  """Kernels as nodes (one per launch), buffers as edges from the launch that writes them to those that read them;
  the function's arguments, host constants and results as nodes of their own. A reshape is its operand's buffer."""
  g, names, maker = _start(fn)
  for j, op in enumerate(fn.body.ops):
    if op.name == 'kernel.launch':
      callee = op.attrs['callee']
      callee = str(callee)
      nid = f"k{j}"
      g.nodes.append(Node(nid, callee, 'kernel', kernel_detail(m.lookup(callee))))
      out = written_args(m, callee)
      for i, v in enumerate(op.operands):
        if i in out: maker[v] = nid
        elif v in maker: g.edges.append(_edge(maker[v], nid, names.get(v, '?'), v.type))
    elif op.name in ('kernel.reshape', 'tensor.reshape') and op.operands[0] in maker: maker[op.results[0]] = maker[op.operands[0]]
    elif op.name == 'tensor.const':
      nid = f"c{j}"
      g.nodes.append(Node(nid, names[op.results[0]] + ' = const', 'const', str(op.results[0].type))); maker[op.results[0]] = nid
    elif op.name == 'func.return':
      for i, v in enumerate(op.operands):
        nid = f"out{i}"
        g.nodes.append(Node(nid, f"result {i}", 'output', str(v.type)))
        if v in maker: g.edges.append(_edge(maker[v], nid, names.get(v, '?'), v.type))
  return g


def tensor_graph(fn: Operation) -> Graph:
  """Ops as nodes, values as edges from the op that makes them to each op that uses them (MLIR's op graph)."""
  g, names, maker = _start(fn)
  for j, op in enumerate(fn.body.ops):
    nid = f"op{j}"
    kind = 'output' if op.name == 'func.return' else 'const' if op.name.endswith('.const') else 'op'
    res = ', '.join(names[r] for r in op.results)
    g.nodes.append(Node(nid, (res + ' = ' if res else '') + op.name, kind, ', '.join(str(r.type) for r in op.results),
                        op.loc.line if op.loc is not None else 0))
    for v in op.operands:
      if v in maker: g.edges.append(_edge(maker[v], nid, names.get(v, '?'), v.type))
    for r in op.results: maker[r] = nid
  return g


def is_kernel_level(fn: Operation) -> bool:
  return any(op.name == 'kernel.launch' for op in fn.body.ops)


def module_graph(m: Module, fn: Operation) -> Graph:
  """The kernel graph of a function that launches kernels, else its tensor graph."""
  return kernel_graph(m, fn) if is_kernel_level(fn) else tensor_graph(fn)


# ---------------------------------------------------------------- Graphviz
_SHAPE = {'kernel': 'box, style="rounded,filled", fillcolor="#dbe8ff"', 'input': 'ellipse', 'output': 'ellipse, style=filled, fillcolor="#e8f5e0"',
          'const': 'note', 'op': 'box'}

def _label(*lines: str) -> str:
  """A DOT string of lines (each escaped; joined by DOT's \\n)."""
  return '"' + '\\n'.join(l.replace('\\', '\\\\').replace('"', '\\"') for l in lines if l) + '"'

def _bytes(n: int) -> str:
  for unit, k in (('GB', 1 << 30), ('MB', 1 << 20), ('KB', 1 << 10)):
    if n >= k: return f"{n / k:.1f} {unit}"
  return f"{n} B"

def to_dot(g: Graph) -> str:
  """The graph as a Graphviz digraph: `tgc-opt --view-graph in.tgc | dot -Tsvg > g.svg`."""
  out = [f"digraph {_label(g.name)} {{", '  rankdir=TB;', '  node [fontname="monospace", fontsize=10];', '  edge [fontname="monospace", fontsize=9];']
  for n in g.nodes: out.append(f"  {n.id} [label={_label(n.label, n.detail)}, shape={_SHAPE[n.kind]}];")
  for e in g.edges: out.append(f"  {e.src} -> {e.dst} [label={_label(f'{e.value}: {e.type}', _bytes(e.bytes) if e.bytes else '')}];")
  out.append('}')
  return '\n'.join(out) + '\n'


# ---------------------------------------------------------------- layout
def layout(g: Graph, char_w: float = 7.0, node_h: float = 34.0, gap_x: float = 24.0, gap_y: float = 56.0) -> dict:
  """A layered drawing: each node one layer below the lowest of its sources (a source with no sources sits just above
  its first consumer), nodes in a layer ordered by the mean position of their neighbours (sweeps down and up), each
  layer centred. Returns {id: [x, y, w, h]} and the drawing's width and height."""
  ids = [n.id for n in g.nodes]
  preds: dict[str, list[str]] = {i: [] for i in ids}
  succs: dict[str, list[str]] = {i: [] for i in ids}
  for e in g.edges:
    if e.src in preds and e.dst in preds: preds[e.dst].append(e.src); succs[e.src].append(e.dst)
  layer: dict[str, int] = {}
  for i in ids: layer[i] = 1 + max((layer[p] for p in preds[i] if p in layer), default=-1)
  for i in ids:  # sources sit just above their first consumer
    if not preds[i] and succs[i]: layer[i] = max(0, min(layer[s] for s in succs[i]) - 1)
  nl = max(layer.values(), default=-1) + 1
  rows: list[list[str]] = [[] for _ in range(nl)]
  for i in ids: rows[layer[i]].append(i)
  # (a kernel's second line gets its profiled time in front of it in the viewer: room for it)
  width = {n.id: max(len(n.label), len(n.detail) + (13 if n.kind == 'kernel' else 0)) * char_w + 16 for n in g.nodes}
  pos = {i: float(k) for row in rows for k, i in enumerate(row)}
  for sweep in range(4):
    order = range(1, nl) if sweep % 2 == 0 else range(nl - 2, -1, -1)
    for li in order:
      nb = preds if sweep % 2 == 0 else succs
      key = {i: (sum(pos[p] for p in nb[i]) / len(nb[i])) if nb[i] else pos[i] for i in rows[li]}
      rows[li].sort(key=lambda i: key[i])
      for k, i in enumerate(rows[li]): pos[i] = float(k)
  spans = [sum(width[i] for i in row) + gap_x * max(len(row) - 1, 0) for row in rows]
  total_w = max(spans, default=0) + 2 * gap_x
  box, y = {}, gap_y / 2
  for row, span in zip(rows, spans):
    x = (total_w - span) / 2
    for i in row:
      box[i] = [round(x, 1), round(y, 1), round(width[i], 1), node_h]
      x += width[i] + gap_x
    y += node_h + gap_y
  return {'boxes': box, 'width': round(total_w, 1), 'height': round(y, 1)}
