"""docs/api.md cannot rot: every ```python block runs, and prints exactly the ```text block after it.

Each block runs with exec in a fresh namespace (on the default device, CPU, whatever $DEVICE says), its
stdout captured. `python tests/test_api_docs.py` prints every block's actual output, to update the page.
"""
from __future__ import annotations
import contextlib, io, os, re, sys
import pytest

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs', 'api.md')
_FENCE = re.compile(r'^```(\w*)[ \t]*\n(.*?)^```[ \t]*$', re.M | re.S)


def doc_examples(path: str = DOC) -> list[tuple[int, str, str | None]]:
  """(line, python source, expected output or None) for every ```python block, in order."""
  with open(path) as f: text = f.read()
  blocks = list(_FENCE.finditer(text))
  out = []
  for i, m in enumerate(blocks):
    if m.group(1) != 'python': continue
    nxt = blocks[i + 1] if i + 1 < len(blocks) else None
    # the expected output is the ```text block right after it (only blank lines between)
    follows = nxt is not None and nxt.group(1) == 'text' and not text[m.end():nxt.start()].strip()
    out.append((text.count('\n', 0, m.start()) + 1, m.group(2), nxt.group(2) if follows else None))
  return out


def run_example(src: str, name: str) -> str:
  buf = io.StringIO()
  ns = {'__name__': '__docs__'}
  with contextlib.redirect_stdout(buf):
    exec(compile(src, name, 'exec'), ns)
  return buf.getvalue()


EXAMPLES = doc_examples()


def test_every_example_has_expected_output():
  assert len(EXAMPLES) >= 12, f"docs/api.md should have an example per group, found {len(EXAMPLES)}"
  missing = [line for line, _, exp in EXAMPLES if exp is None]
  assert not missing, f"```python blocks without a ```text block right after them, at lines {missing}"


@pytest.mark.parametrize('line,src,expected', EXAMPLES, ids=[f"api.md:{l}" for l, _, _ in EXAMPLES])
def test_example(line, src, expected, monkeypatch):
  monkeypatch.delenv('DEBUG', raising=False); monkeypatch.delenv('DEVICE', raising=False)
  got = run_example(src, f"docs/api.md:{line}")
  assert expected is not None, f"no ```text block after the example at line {line}"
  assert got == expected, f"docs/api.md:{line}: output differs\n--- got ---\n{got}--- expected ---\n{expected}"


if __name__ == '__main__':
  for line, src, expected in EXAMPLES:
    got = run_example(src, f"docs/api.md:{line}")
    sys.stdout.write(f"==== line {line} {'ok' if got == expected else 'DIFFERS'}\n{got}")
