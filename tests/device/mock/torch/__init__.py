"""A stand-in for the parts of PyTorch that tests/device/gpu_check.py uses,
on numpy and host memory, so the device check's Python runs on machines
without a GPU: with tests/fake_cuda.c as libcuda.so.1 (it computes what the
kernels must compute from their launch arguments), every step but the GPU's
own work is exercised. Development aid only (needs python3-numpy):

  mkdir -p /tmp/fakecuda && ln -sf $PWD/build/tests/libfake_cuda.so /tmp/fakecuda/libcuda.so.1
  PYTHONPATH=tests/device/mock LD_LIBRARY_PATH=/tmp/fakecuda /usr/bin/python3 \
      tests/device/gpu_check.py --kernels build/device/kernels/timed --time --repeats 2
"""
import math
import time as _time

import numpy as np

__version__ = "mock"
float32, float64, bool = np.float32, np.float64, np.bool_


class _Version:
    cuda = "mock"


version = _Version()


class Tensor:
    def __init__(self, a):
        self.a = a

    # shape and layout
    @property
    def shape(self):
        return self.a.shape

    def dim(self):
        return self.a.ndim

    def stride(self, i=None):
        s = tuple(x // self.a.itemsize for x in self.a.strides)
        return s if i is None else s[i]

    def data_ptr(self):
        return self.a.ctypes.data

    def contiguous(self):
        return Tensor(np.ascontiguousarray(self.a))

    def double(self):
        return Tensor(self.a.astype(np.float64))

    def transpose(self, i, j):
        return Tensor(np.swapaxes(self.a, i, j))

    def reshape(self, *s):
        return Tensor(self.a.reshape(*s))

    def unsqueeze(self, i):
        return Tensor(np.expand_dims(self.a, i))

    def abs(self):
        return Tensor(np.abs(self.a))

    def max(self):
        return Tensor(np.nanmax(self.a) if not np.isnan(self.a).any() else np.array(np.nan))

    def item(self):
        return float(self.a)

    def mean(self, dim, keepdim=False):
        return Tensor(self.a.mean(axis=dim, keepdims=keepdim))

    def tril(self, k=0):
        return Tensor(np.tril(self.a, k))

    def masked_fill(self, mask, v):
        return Tensor(np.where(mask.a, v, self.a))

    def nan_to_num(self, v):
        return Tensor(np.nan_to_num(self.a, nan=v))

    def __invert__(self):
        return Tensor(~self.a)

    def _b(self, o):
        return o.a if isinstance(o, Tensor) else o

    def __add__(self, o): return Tensor(self.a + self._b(o))
    def __radd__(self, o): return Tensor(self._b(o) + self.a)
    def __sub__(self, o): return Tensor(self.a - self._b(o))
    def __rsub__(self, o): return Tensor(self._b(o) - self.a)
    def __mul__(self, o): return Tensor(self.a * self._b(o))
    def __rmul__(self, o): return Tensor(self._b(o) * self.a)
    def __truediv__(self, o): return Tensor(self.a / self._b(o))


def _shape(s):
    return tuple(s) if isinstance(s, (list, tuple)) else (s,)


class Generator:
    def __init__(self, device=None):
        self.r = np.random.default_rng(0)

    def manual_seed(self, s):
        self.r = np.random.default_rng(s)


def rand(shape, generator=None, device=None, dtype=np.float32):
    r = generator.r if generator else np.random.default_rng(0)
    return Tensor(r.random(_shape(shape)).astype(dtype))


def full(shape, v, device=None, dtype=np.float32):
    return Tensor(np.full(_shape(shape), v, dtype=dtype))


def zeros(*shape, device=None, dtype=np.float32):
    return Tensor(np.zeros(shape, dtype=dtype))


def ones(shape, device=None, dtype=np.float32):
    return Tensor(np.ones(_shape(shape), dtype=dtype))


def matmul(a, b, out=None):
    r = np.matmul(a.a, b.a)
    if out is not None:
        out.a[...] = r
        return out
    return Tensor(r)


def relu(x): return Tensor(np.where(x.a < 0, 0, x.a))
def clamp(x, lo, hi): return Tensor(np.clip(x.a, lo, hi))
def sqrt(x): return Tensor(np.sqrt(x.a))


def softmax(z, dim=-1):
    m = np.max(z.a, axis=dim, keepdims=True)
    e = np.exp(z.a - m)
    return Tensor(e / e.sum(axis=dim, keepdims=True))


class _F:
    @staticmethod
    def gelu(x, approximate="tanh"):
        v = x.a
        return Tensor(0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))))

    @staticmethod
    def silu(x):
        return Tensor(x.a / (1 + np.exp(-x.a)))

    @staticmethod
    def layer_norm(x, shape, g, b, eps):
        m = x.a.mean(-1, keepdims=True)
        v = ((x.a - m) ** 2).mean(-1, keepdims=True)
        return Tensor((x.a - m) / np.sqrt(v + eps) * g.a + b.a)


class _NN:
    functional = _F()


nn = _NN()


class _Flag:
    allow_tf32 = True


class _Backends:
    class cuda:
        matmul = _Flag()

    cudnn = _Flag()


backends = _Backends()


class _Event:
    def __init__(self, enable_timing=False):
        self.t = 0.0

    def record(self):
        self.t = _time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, e):
        return (e.t - self.t) * 1e3


class _Stream:
    cuda_stream = 0


class _Props:
    name, major, minor, multi_processor_count = "mock GPU (fake driver)", 9, 0, 132


class _Cuda:
    Event = _Event

    @staticmethod
    def is_available(): return True

    @staticmethod
    def init(): pass

    @staticmethod
    def synchronize(): pass

    @staticmethod
    def current_stream(): return _Stream()

    @staticmethod
    def get_device_properties(i): return _Props()

    @staticmethod
    def get_device_name(i=0): return _Props.name

    class CUDAGraph:  # capture is not emulated: gpu_check falls back to direct launches
        pass

    @staticmethod
    def graph(g):
        raise RuntimeError("mock: no CUDA graphs")


cuda = _Cuda()
