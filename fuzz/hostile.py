"""Mutations of attribute values, lists and sizes: what a hostile user edits in IR text or passes to the Tensor API.

The numbers that say how big something is (a launch's global_size, a special's extent, a buffer's declared size,
a view's shape, strides, offset and mask, a type's dimensions, a reduce's axes, a reshape's shape, a pad's pairs)
are where a program that still parses can lie: a size one too large, a list one entry too long or short. Mutations
near the value (+-1, doubled, halved, 0, 1, -1) and of a list's length get past the parser far more often than a
random number does, and reach the verifier's and the runtime's trust in them.

  mutate_text(r, text)   one such change in IR text (fuzz.mutate, fuzz.ir)
  mutate_list(r, value)  one such change in a (nested) list of ints (fuzz.tensor's movement arguments)
"""
from __future__ import annotations
import re

# a number in an attribute: after '=' or ',' or '[' or '(' (lists, pairs), a special's or define_local's size, or a
# type's dimension ('4x', 'x4x', '<4x')
_ATTR_NUM = re.compile(r'(?<=[=\[(,] )-?\d+\b|(?<=[\[(])-?\d+\b|(?<=uop\.special [gl]idx\d )\d+\b|(?<=uop\.define_local )\w+ \d+\b'
                       r'|(?<=[<x])\d+(?=x)')
_LIST = re.compile(r'\[(-?\d+(?:, -?\d+)*)\]')
_SHAPE = re.compile(r'(?<=<)((?:\d+x)+)(?=[a-z!])')


def near(r, n: int) -> int:
  """A number near n: one off, doubled, halved, or one of 0, 1, -1."""
  return r.choice((n + 1, n - 1, n + 1, n - 1, n * 2, n // 2, 0, 1, -1, n + r.randrange(2, 40)))


def mutate_text(r, text: str) -> str:
  """One change to a size in IR text: a number of an attribute or type moved near its value, or a list of numbers
  (an attribute list, a type's shape) one entry shorter or longer. The text unchanged where there is nothing to change."""
  kind = r.choice(('near', 'near', 'near', 'list', 'shape'))
  if kind == 'list':
    ms = list(_LIST.finditer(text))
    if ms:
      m = r.choice(ms)
      xs = m.group(1).split(', ')
      i = r.randrange(len(xs))
      if r.random() < 0.5 and len(xs) > 1: del xs[i]
      else: xs.insert(i, r.choice((xs[i], '1', str(near(r, int(xs[i]))))))
      return text[:m.start()] + '[' + ', '.join(xs) + ']' + text[m.end():]
  if kind == 'shape':
    ms = list(_SHAPE.finditer(text))
    if ms:
      m = r.choice(ms)
      xs = m.group(1).split('x')[:-1]
      i = r.randrange(len(xs))
      c = r.random()
      if c < 0.3 and len(xs) > 1: del xs[i]
      elif c < 0.6: xs.insert(i, r.choice((xs[i], '1', '2')))
      else: xs[i] = str(max(0, near(r, int(xs[i]))))
      return text[:m.start()] + ''.join(x + 'x' for x in xs) + text[m.end():]
  ms = list(_ATTR_NUM.finditer(text))
  if not ms: return text
  m = r.choice(ms)
  g = m.group(0)
  head, num = (g.rsplit(' ', 1) if ' ' in g else ('', g))
  return text[:m.start()] + (head + ' ' if head else '') + str(near(r, int(num))) + text[m.end():]


def mutate_list(r, value):
  """One change to a (nested) list of ints: an entry near its value (or -1), an entry dropped, or one added."""
  if not isinstance(value, list) or not value: return value
  out = [list(x) if isinstance(x, list) else x for x in value]
  i = r.randrange(len(out))
  c = r.random()
  if c < 0.45:
    if isinstance(out[i], list): out[i] = mutate_list(r, out[i])
    else: out[i] = -1 if r.random() < 0.2 else near(r, out[i])
  elif c < 0.7 and len(out) > 1: del out[i]
  else: out.insert(i, list(out[i]) if isinstance(out[i], list) else r.choice((out[i], 1, -1, 0)))
  return out
