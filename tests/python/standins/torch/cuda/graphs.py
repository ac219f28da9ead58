"""Stand-in for ``torch.cuda.graphs``: ``CUDAGraph`` (a subclass of the C++
graph in PyTorch; here plain) whose ``capture_begin`` tells the current
allocator to allocate to the graph's pool, as PyTorch's does through
``beginAllocateToPool`` (a pluggable allocator without the hook does nothing
then), and the ``graph`` context manager, which calls ``capture_begin`` and
``capture_end``."""

import contextlib
import itertools

_ids = itertools.count(1)


class CUDAGraph:
    def __init__(self):
        self.capturing = False
        self.pool_id = (next(_ids), 0)

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self.capturing = True

    def capture_end(self):
        self.capturing = False

    def replay(self):
        pass

    def pool(self):
        return self.pool_id


@contextlib.contextmanager
def graph(cuda_graph, pool=None, stream=None, capture_error_mode="global"):
    cuda_graph.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
    try:
        yield
    finally:
        cuda_graph.capture_end()
