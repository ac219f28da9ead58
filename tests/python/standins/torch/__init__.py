"""Stand-in for PyTorch (tests only): what gpumem.torch touches.

``torch.empty(n, dtype=torch.uint8, device='cuda')`` allocates through the
current CUDA allocator as PyTorch does (``_C``: the native caching allocator
until ``torch.cuda.memory.change_current_allocator`` makes a pluggable one
current), and a tensor's memory is freed through the allocator when the tensor
is collected. ``torch.cuda`` and ``torch.cuda.memory`` have the functions
gpumem.torch patches, which behave as PyTorch's under a pluggable allocator
(the statistics raise "CUDAPluggableAllocator does not yet support
getDeviceStats"; empty_cache does nothing).
"""

from . import _C, cuda  # noqa: F401


class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


uint8 = dtype("uint8", 1)
float32 = dtype("float32", 4)


class device:
    def __init__(self, spec):
        if isinstance(spec, device):
            spec = str(spec)
        kind, _, index = str(spec).partition(":")
        self.type = kind
        self.index = int(index) if index else None

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


class Tensor:
    """A flat tensor's storage: its pointer, size and device; the allocator's
    deleter frees it when the tensor is collected (a DataPtr's deleter)."""

    def __init__(self, ptr, nbytes, dev, deleter):
        self._ptr, self.nbytes, self.device, self._deleter = ptr, nbytes, dev, deleter

    def data_ptr(self):
        return self._ptr or 0

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def __del__(self):
        if self._deleter is not None:
            deleter, self._deleter = self._deleter, None
            deleter(self._ptr)


def empty(*size, dtype=uint8, device="cpu"):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    count = 1
    for n in size:
        count *= n
    nbytes = count * dtype.itemsize
    dev = globals()["device"](device)
    if dev.type != "cuda":
        return Tensor(0, nbytes, dev, None)
    index = cuda.current_device() if dev.index is None else dev.index
    allocator = _C._current_allocator()
    ptr = allocator.malloc(nbytes, index, cuda.current_stream(index).cuda_stream)
    return Tensor(ptr, nbytes, globals()["device"]("cuda:%d" % index), allocator.raw_delete)
