"""Stand-in for ``cupy.cuda.stream``: a stream's ``ptr`` is its handle (an int;
0 is the null stream); ``with stream:`` makes it current, and
``get_current_stream()`` returns the current one (the null stream by default)."""

import itertools

_handles = itertools.count(0x5000, 0x100)  # made-up handles, never dereferenced


class Stream:
    def __init__(self, null=False, non_blocking=False, ptds=False):
        del non_blocking, ptds
        self.ptr = 0 if null else next(_handles)
        self._previous = []

    def use(self):
        global _current
        _current = self
        return self

    def __enter__(self):
        self._previous.append(get_current_stream())
        return self.use()

    def __exit__(self, *exc):
        self._previous.pop().use()

    def synchronize(self):
        pass


Stream.null = Stream(null=True)
_current = Stream.null


def get_current_stream(device_id=-1):
    del device_id
    return _current
