"""tgc.nn: layers in tinygrad's shape. A layer is a plain object whose Tensor attributes are its parameters
(tgc.nn.state finds them by walking attributes); calling it applies it. Initialisation follows torch's
defaults (uniform in +-1/sqrt(fan_in) for Linear and the convolutions), as tinygrad's layers do."""
from __future__ import annotations
import math
from tgc.tensor import Tensor
from tgc.errors import ShapeError, DTypeError

__all__ = ['Linear', 'Conv2d', 'ConvTranspose2d', 'BatchNorm', 'BatchNorm2d', 'LayerNorm', 'GroupNorm', 'Embedding']


def _uniform(shape, bound: float) -> Tensor: return Tensor.uniform(*shape, low=-bound, high=bound)

def _pair(v, n: int = 2) -> tuple: return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class Linear:
  """y = x @ weight.T + bias; weight (out_features, in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
  """NCHW convolution; weight (out_channels, in_channels/groups, *kernel_size)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1, bias: bool = True):
    self.kernel_size = _pair(kernel_size)
    if in_channels % groups or out_channels % groups: raise ShapeError(f"Conv2d: {in_channels} and {out_channels} channels do not split into {groups} groups")
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    bound = 1 / math.sqrt(in_channels // groups * math.prod(self.kernel_size))
    self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound)
    self.bias = _uniform((out_channels,), bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)


class ConvTranspose2d(Conv2d):
  """The transpose of Conv2d (Tensor.conv_transpose2d); weight (in_channels, out_channels/groups, *kernel_size)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, dilation=1, groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    bound = 1 / math.sqrt(out_channels // groups * math.prod(self.kernel_size))
    self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound)
    self.bias = _uniform((out_channels,), bound) if bias else None
    self.output_padding = output_padding
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)


class BatchNorm:
  """Normalises over every axis but the channels (axis 1). In training (Tensor.training) it uses the batch's
  statistics and assigns the running ones (momentum, unbiased variance, as torch); else the running ones."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight, self.bias = (Tensor.ones(sz), Tensor.zeros(sz)) if affine else (None, None)
    if track_running_stats:
      self.running_mean, self.running_var = Tensor.zeros(sz).requires_grad_(False), Tensor.ones(sz).requires_grad_(False)
      self.num_batches_tracked = Tensor.zeros(dtype='int32').requires_grad_(False)  # 0-d, as torch's
  def __call__(self, x: Tensor) -> Tensor:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = [1, -1] + [1] * (x.ndim - 2)
    if Tensor.training or not self.track_running_stats:
      mean = x.mean(axes)
      y = x - mean.reshape(shape)
      var = (y * y).mean(axes)
      if Tensor.training and self.track_running_stats:
        n = x.numel() / x.shape[1]
        m = self.momentum
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + m * n / max(n - 1, 1) * var.detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else: mean, var = self.running_mean, self.running_var
    invstd = (var + self.eps).rsqrt()
    scale = invstd if self.weight is None else self.weight * invstd
    y = (x - mean.reshape(shape)) * scale.reshape(shape)
    return y if self.bias is None else y + self.bias.reshape(shape)

BatchNorm2d = BatchNorm


class LayerNorm:
  """Normalises over the last len(normalized_shape) axes, then weight * y + bias."""
  def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = _pair(normalized_shape, 1)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight, self.bias = (Tensor.ones(*self.normalized_shape), Tensor.zeros(*self.normalized_shape)) if elementwise_affine else (None, None)
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-len(self.normalized_shape):] != self.normalized_shape: raise ShapeError(f"LayerNorm{self.normalized_shape} of a tensor of shape {x.shape}")
    y = x.layernorm(self.axis, self.eps)
    return y if self.weight is None else y * self.weight + self.bias


class GroupNorm:
  """Normalises each group of num_channels/num_groups channels (with the spatial axes), then per channel affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight, self.bias = (Tensor.ones(num_channels), Tensor.zeros(num_channels)) if affine else (None, None)
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels: raise ShapeError(f"GroupNorm of {self.num_channels} channels of a tensor of shape {x.shape}")
    y = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None: return y
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y * self.weight.reshape(shape) + self.bias.reshape(shape)


class Embedding:
  """Rows of weight (vocab_size, embed_size) by integer index: a gather of rows (an index outside the vocabulary
  reads the nearest row: clamped)."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_size, self.embed_size = vocab_size, embed_size
    self.weight = _uniform((vocab_size, embed_size), math.sqrt(6 / (vocab_size + embed_size)))
  def __call__(self, idx: Tensor) -> Tensor:
    if idx.dtype.is_float: raise DTypeError(f"Embedding needs integer indices, got {idx.dtype!r}")
    rows = idx.reshape(-1, 1).expand(idx.numel(), self.embed_size)
    return self.weight._gather(0, rows).reshape(*idx.shape, self.embed_size)
