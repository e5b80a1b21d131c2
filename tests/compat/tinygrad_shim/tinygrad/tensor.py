from tgc.tensor import Tensor


def _to_np_dtype(dt):
  """The numpy dtype a tgc DType's values come back as from `Tensor.numpy()`."""
  return None if dt is None else Tensor([], dtype=dt).numpy().dtype
