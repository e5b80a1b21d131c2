"""The dialects: importing this package registers every op."""
from tgc.dialects import builtin, tensor, kernel, uop  # noqa: F401
