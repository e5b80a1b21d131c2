"""Several devices: devices by index (CPU:N), sharded tensors on them (tinygrad's shard / to(tuple) API), the host
all-reduce; results, gradients and training steps equal to one device's."""
import numpy as np
import pytest
from tgc import Tensor, TgcError
from tgc.runtime import get_device


def test_devices_by_index_are_distinct_objects():
  assert get_device('CPU:0') is get_device('CPU') is get_device('cpu')
  d1 = get_device('CPU:1')
  assert d1 is not get_device('CPU') and d1.name == 'CPU:1' and d1.index == 1
  assert d1.allocator is not get_device('CPU').allocator


def test_tensor_on_a_device_index_and_copies_between_them():
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  x = Tensor(a, device='cpu:1')
  assert x.device == 'CPU:1' and Tensor(a, device='CPU:0').device == 'CPU'
  y = (x * 2).to('CPU:2')
  assert y.device == 'CPU:2'
  np.testing.assert_array_equal(y.numpy(), a * 2)
  with pytest.raises(TgcError, match="different devices"): x + Tensor(a)


@pytest.mark.parametrize('bad', ['CPU:x', 'CPU:-1', 'NOPE:1'])
def test_bad_device_index_is_a_clear_error(bad):
  with pytest.raises(TgcError, match="device"): Tensor([1.0], device=bad)
