"""The eager compile cache: one compilation per graph structure; shape, dtype, view and baked-in constants miss."""
import numpy as np
from tgc import Tensor
from tgc import tensor as T

RNG = np.random.default_rng(11)

def _f32(*shape): return RNG.standard_normal(shape).astype(np.float32)

def _compiles(fn) -> int:
  n = len(T._COMPILED); fn(); return len(T._COMPILED) - n

def test_same_structure_other_data_hits_with_right_numbers():
  a, b = _f32(4, 4), _f32(4, 4)
  _compiles(lambda: (Tensor(a) + Tensor(b)).softmax(-1).numpy())
  for _ in range(3):
    a, b = _f32(4, 4), _f32(4, 4)
    got = []
    assert _compiles(lambda: got.append((Tensor(a) + Tensor(b)).softmax(-1).numpy())) == 0
    e = np.exp((a + b) - (a + b).max(-1, keepdims=True))
    np.testing.assert_allclose(got[0], e / e.sum(-1, keepdims=True), rtol=1e-5)

def test_broadcast_fast_path_matches_numpy():
  a, b, c = _f32(3, 5), _f32(3, 5), _f32(5)
  np.testing.assert_allclose((Tensor(a) * Tensor(b) + Tensor(c)).numpy(), a * b + c, rtol=1e-6)
  np.testing.assert_allclose((Tensor(a) - Tensor(b)).numpy(), a - b, rtol=1e-6)

def test_shape_dtype_view_constant_miss():
  a = _f32(4, 6)
  (Tensor(a) * 2).numpy()
  assert _compiles(lambda: (Tensor(_f32(4, 7)) * 2).numpy()) == 1  # another shape
  assert _compiles(lambda: (Tensor(a.astype(np.float64)) * 2).numpy()) == 1  # another dtype
  got = []
  assert _compiles(lambda: got.append((Tensor(a).T * 2).numpy())) == 1  # a view of the same buffer
  np.testing.assert_allclose(got[0], a.T * 2, rtol=1e-6)
  assert _compiles(lambda: got.append((Tensor(a) * 3).numpy())) == 1  # another baked-in constant
  np.testing.assert_allclose(got[1], a * 3, rtol=1e-6)
  assert _compiles(lambda: (Tensor(_f32(4, 6)) * 3).numpy()) == 0

def test_leaf_identity_is_part_of_the_key():
  # the same ops over the same shapes: which leaf feeds which operand tells the graphs apart
  a, b = _f32(4, 4), _f32(4, 4)
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_allclose(((ta - tb) + (tb - ta)).numpy(), np.zeros((4, 4), np.float32), atol=1e-6)
  got = []
  assert _compiles(lambda: got.append(((ta - tb) + (ta - tb)).numpy())) == 1
  np.testing.assert_allclose(got[0], 2 * (a - b), rtol=1e-5)
  assert _compiles(lambda: got.append((ta + ta).numpy())) == 1
  np.testing.assert_allclose(got[1], 2 * a, rtol=1e-6)
  assert _compiles(lambda: got.append((tb + ta).numpy())) == 1  # (a + b made above: the operands' order is its own)
  assert _compiles(lambda: got.append((Tensor(b) + Tensor(a)).numpy())) == 0
  np.testing.assert_allclose(got[3], b + a, rtol=1e-6)

def test_signed_zero_and_nan_constants_miss():
  a = _f32(4, 4)
  (Tensor(a) * 0.0).numpy()
  got = []
  assert _compiles(lambda: got.append((Tensor(a) * -0.0).numpy())) == 1
  np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(a * np.float32(-0.0)))

def test_key_numbers_leaves_as_build_module_does():
  # random graphs with shared nodes and several roots: _graph_key's leaves are _build_module's arguments, in order,
  # and the function realized from them computes what numpy does
  rng = np.random.default_rng(3)
  ops = [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - y, lambda x, y: (x < y).where(x, y)]
  for _ in range(30):
    arrs = [_f32(3) for _ in range(4)]
    pool = [(Tensor(a), a) for a in arrs]
    for _ in range(12):
      (x, xa), (y, ya) = (pool[i] for i in rng.integers(0, len(pool), 2))
      f = ops[rng.integers(0, len(ops))]
      pool.append((f(x, y), f(xa, ya) if f is not ops[3] else np.where(xa < ya, xa, ya)))
    picks = pool[-3:] + [pool[int(rng.integers(4, len(pool) - 3))]]
    roots = list(dict.fromkeys(t.node for t, _ in picks if not t.node.realized))
    _, leaves = T._graph_key(roots)
    assert leaves == T._build_module(roots)[1] and T._graph_key(roots) == T._graph_key_deep(roots)
    Tensor.realize(*[t for t, _ in picks])
    for t, a in picks: np.testing.assert_allclose(t.numpy(), a, rtol=1e-5)

def test_a_host_constant_result_is_a_copy_per_call():
  # the plan makes a host constant's Buffer once; each realization returns its own copy (through a reshape too)
  a, b = (Tensor.arange(5).reshape(5, 1).realize() for _ in range(2))
  assert a.node.buf is not b.node.buf
  np.testing.assert_array_equal(a.numpy(), np.arange(5).reshape(5, 1))
  np.testing.assert_array_equal(b.numpy(), np.arange(5).reshape(5, 1))

def test_a_graph_deeper_than_the_recursion_limit():
  # _graph_key recurses and falls back to its loop past Python's recursion limit: the same key, the same leaves
  import sys
  a = _f32(4)
  x = Tensor(a)
  for _ in range(sys.getrecursionlimit() + 200): x = x * 1.0 + 1.0
  key, leaves = T._graph_key([x.node])
  assert (key, leaves) == T._graph_key_deep([x.node]) and leaves == T._build_module([x.node])[1]
  y = Tensor(a) * 2 - Tensor(a)  # (and a shallow one: both ways agree)
  assert T._graph_key([y.node]) == T._graph_key_deep([y.node])

def _direct(name, *args, **kw): return getattr(Tensor, name).__wrapped__(*args, **kw)

def test_graph_templates_make_the_graph_the_method_makes():
  # the second call of a templated method replays its recorded nodes: the same graph (key and leaves) as the
  # method's own code makes, and the same numbers
  x, w, b = Tensor(_f32(2, 3, 6, 6)), Tensor(_f32(4, 3, 3, 3)), Tensor(_f32(4))
  logits, labels = Tensor(_f32(5, 4)), Tensor(np.array([0, 3, 1, 2, 2], np.int32))
  calls = [('conv2d', (x, w, b), {'padding': 1}), ('conv2d', (x, w), {'stride': 2}), ('softmax', (x,), {}), ('log_softmax', (x, 1), {}),
           ('max_pool2d', (x,), {'return_indices': True}), ('avg_pool2d', (x, (3, 3)), {'padding': 1}), ('layernorm', (x,), {}),
           ('matmul', (x, Tensor(_f32(6, 5))), {}), ('logsumexp', (x, 2), {'keepdim': True}), ('sum', (x,), {'axis': (1, 2)}),
           ('mean', (x, 1), {}), ('max', (x,), {}), ('min', (x, 3), {'keepdim': True}), ('var', (x,), {'axis': 0}), ('std', (x,), {}),
           ('prod', (x, 2), {}), ('sum', (Tensor(_f32(3, 4).astype(np.float16)),), {'dtype': 'float32'}),
           ('_gelu_erf', (x,), {}),
           ('sigmoid', (x,), {}), ('silu', (x,), {}), ('softplus', (x, 2.0), {}), ('elu', (x,), {'alpha': 0.5}),
           ('abs', (x,), {}), ('sign', (x,), {}), ('round', (x * 3,), {}), ('floor', (x,), {}), ('ceil', (x,), {}), ('cos', (x,), {}),
           ('tan', (x,), {}), ('linear', (x, Tensor(_f32(6, 5)), Tensor(_f32(5))), {}), ('linear', (x, Tensor(_f32(6, 5))), {}),
           ('relu', (x,), {}), ('relu', (Tensor(_f32(3, 4).astype(np.float16)),), {}), ('tril', (x,), {}), ('triu', (x, 1), {}), ('tril', (x > 0, -1), {}), ('triu', (Tensor(_f32(4, 7)), 2), {}),
           ('where', (x > 0, x, float('-inf')), {}), ('where', (x > 0, 1.0, x[0]), {}), ('where', (x > 0, 2, 0), {}), ('scaled_dot_product_attention', (x, x * 2, x + 1), {'is_causal': True}),
           ('scaled_dot_product_attention', (x, Tensor(_f32(2, 1, 6, 6)), Tensor(_f32(2, 1, 6, 6))), {'enable_gqa': True}),
           ('scaled_dot_product_attention', (x, x, x), {'attn_mask': Tensor(_f32(6, 6)) > 0}),
           ('scaled_dot_product_attention', (x, x, x, Tensor(_f32(6, 6))), {}),
           ('cross_entropy', (logits, labels), {}), ('cross_entropy', (logits, logits.softmax(1)), {'label_smoothing': 0.1}),
           ('nll_loss', (logits.log_softmax(1), labels), {'ignore_index': 2}), ('sparse_categorical_crossentropy', (logits, labels), {}),
           ('binary_crossentropy', (x.sigmoid(), (x > 0).cast('float32')), {}),
           ('binary_crossentropy_logits', (x, (x > 0).cast('float32')), {'pos_weight': 2.0})]
  for name, args, kw in calls:
    for _ in range(2): got = getattr(Tensor, name)(*args, **kw)
    want = _direct(name, *args, **kw)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert T._graph_key([t.node for t in got]) == T._graph_key([t.node for t in want]), name
    for g, e in zip(got, want): np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)

def test_graph_templates_tell_signatures_apart():
  a, b = _f32(7, 7), _f32(7, 7)
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_allclose((ta @ ta).numpy(), a @ a, rtol=1e-5, atol=1e-5)  # (one tensor twice: a template of its own)
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((tb @ ta).numpy(), b @ a, rtol=1e-5, atol=1e-5)
  a = a[:4, :4]
  np.testing.assert_allclose(Tensor(a.astype(np.float16)).softmax(0).numpy().astype(np.float32), Tensor(a).softmax(0).numpy(), atol=2e-3)
  e = np.exp(a - a.max(0, keepdims=True))
  np.testing.assert_allclose(Tensor(a).softmax(0).numpy(), e / e.sum(0, keepdims=True), rtol=1e-5)
  m = Tensor(a).layernorm(eps=0.5).numpy(); y = a - a.mean(-1, keepdims=True)
  np.testing.assert_allclose(m, y / np.sqrt((y * y).mean(-1, keepdims=True) + 0.5), rtol=1e-5)
  np.testing.assert_allclose(Tensor(a).layernorm(eps=2.0).numpy(), y / np.sqrt((y * y).mean(-1, keepdims=True) + 2.0), rtol=1e-5)

def test_a_graph_template_is_not_made_from_a_leaf_made_inside():
  # matmul of a list makes a leaf of it inside: nothing is recorded, and each call uses its own list
  a = _f32(3, 3)
  for k in range(3):
    m = [[float(k + i + j) for j in range(3)] for i in range(3)]
    np.testing.assert_allclose(Tensor(a).matmul(m).numpy(), a @ np.array(m, np.float32), rtol=1e-5)

def test_gradients_through_replayed_graphs():
  x = Tensor(_f32(2, 3, 5, 5), requires_grad=True)
  w = Tensor(_f32(4, 3, 3, 3), requires_grad=True)
  grads = []
  for _ in range(2):
    x.grad = w.grad = None
    x.conv2d(w, padding=1).softmax(1).sum().backward()
    grads.append((x.grad.numpy(), w.grad.numpy()))
  for g, h in zip(*grads): np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


def test_narrow_float_constants_keep_their_own_rounding():
  # a narrow float's constants are rounded once per value (memoised by the double's bytes): -0.0 is not 0.0
  h = Tensor(np.ones(4, np.float16))
  for _ in range(2):
    assert np.all(np.signbit((h * 0.0).numpy()) == False) and np.all(np.signbit((h * -0.0).numpy()))
    np.testing.assert_array_equal((h * 0.1).numpy(), np.float16(0.1) * np.ones(4, np.float16))
    np.testing.assert_array_equal((h * 70000.0).numpy(), np.full(4, np.inf, np.float16))


def test_gradients_through_replayed_attention_and_losses():
  # the templated API members (attention, the losses) give the same gradients on their replayed calls as on the first,
  # and torch's
  import torch
  rng = np.random.default_rng(3)
  q, k, v, logits = (rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4), (6, 3)))
  labels = np.array([0, 2, 1, 1, 0, 2], np.int32)
  for _ in range(3):
    tq, tk, tv, tl = (Tensor(a, requires_grad=True) for a in (q, k, v, logits))
    loss = tq.scaled_dot_product_attention(tk, tv, is_causal=True).square().sum() + tl.cross_entropy(Tensor(labels))
    loss.backward()
    pq, pk, pv, pl = (torch.tensor(a, requires_grad=True) for a in (q, k, v, logits))
    ploss = torch.nn.functional.scaled_dot_product_attention(pq, pk, pv, is_causal=True).square().sum() + \
      torch.nn.functional.cross_entropy(pl, torch.tensor(labels, dtype=torch.long))
    ploss.backward()
    for t, p_ in ((tq, pq), (tk, pk), (tv, pv), (tl, pl)):
      np.testing.assert_allclose(t.grad.numpy(), p_.grad.numpy(), rtol=1e-4, atol=1e-5)
