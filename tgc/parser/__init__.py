"""Text to IR: the lark grammar (grammar.lark) and the builder that makes ops while lark parses."""
from tgc.parser.parser import parse, parse_chunks

__all__ = ['parse', 'parse_chunks']
