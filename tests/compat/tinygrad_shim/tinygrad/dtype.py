from tgc.tensor import dtypes, DType, least_upper_dtype
from tinygrad.tensor import _to_np_dtype
