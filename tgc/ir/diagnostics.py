"""Diagnostics in MLIR's form: `file:line:col: error: message`, the source line and a caret.

A Location names a place in a source; a Diagnostic is an error (an exception) carrying one, plus
optional notes. The tools print them; `--verify-diagnostics` compares them with expected-* comments.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from tgc.errors import TgcError


@dataclass(frozen=True)
class Source:
  """A named text; kept so that a diagnostic can quote its line."""
  name: str
  text: str
  line_offset: int = 0  # lines before this chunk in the whole file (--split-input-file)
  def line(self, n: int) -> str:
    lines = self.text.split('\n')
    i = n - 1 - self.line_offset
    return lines[i] if 0 <= i < len(lines) else ''

@dataclass(frozen=True)
class Location:
  file: str
  line: int
  col: int
  source: Source | None = field(default=None, compare=False, hash=False)
  def __str__(self): return f"{self.file}:{self.line}:{self.col}"
  def text(self) -> str: return f'loc("{self.file}":{self.line}:{self.col})'

UNKNOWN = Location("<unknown>", 0, 0)


@dataclass
class Note:
  severity: str
  message: str
  loc: Location | None = None


class Diagnostic(TgcError):
  """An error at a place in the input. `notes` are extra (severity, message, loc) lines printed after it."""
  def __init__(self, message: str, loc: Location | None = None, severity: str = 'error', notes: list[Note] | None = None):
    super().__init__(message)
    self.message, self.loc, self.severity, self.notes = message, loc, severity, notes or []

  def format(self, tool: str = 'tgc') -> str:
    out = [_format_one(self.severity, self.message, self.loc, tool)]
    out += [_format_one(n.severity, n.message, n.loc, tool) for n in self.notes]
    return '\n'.join(out)

  def all(self) -> list[Note]:
    return [Note(self.severity, self.message, self.loc)] + list(self.notes)

  def __str__(self): return self.format()


class DiagnosticList(Diagnostic):
  """Several diagnostics reported at once (the verifier collects them all). A Diagnostic itself (the first
  one's message and place), so `except Diagnostic` catches every error in IR, as api.md says; format() and
  all() give every one of them."""
  def __init__(self, diags: list[Diagnostic]):
    first = diags[0] if diags else Diagnostic('no diagnostics')
    super().__init__(first.message, first.loc, first.severity, first.notes)
    self.diags = diags

  def format(self, tool: str = 'tgc') -> str: return '\n'.join(d.format(tool) for d in self.diags)
  def all(self) -> list[Note]: return [n for d in self.diags for n in d.all()]


def _format_one(severity: str, message: str, loc: Location | None, tool: str) -> str:
  if loc is None or loc.line <= 0: return f"{tool}: {severity}: {message}"
  s = f"{loc}: {severity}: {message}"
  if loc.source is not None:
    line = loc.source.line(loc.line)
    if line.strip():
      line = line.replace('\t', ' ')
      s += f"\n{line}\n{' ' * max(loc.col - 1, 0)}^"
  return s
