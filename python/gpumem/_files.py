"""Files the package writes at a path its caller names (dump_snapshot, the map
tool), written as the library writes its own (gpumem_snapshot_file): whole or
not at all, to a new file in the same folder renamed onto the path once
written, so that a reader never sees half of one; and never through a symbolic
link at the path itself, which is refused and left as it is (issue 33, item 3).
"""

import errno
import itertools
import os
import stat

_counter = itertools.count()


def write_whole(path, data):
    """Writes bytes `data` to `path` as described above; raises OSError (the
    path named) when it cannot, leaving nothing behind."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        why = ("it is a symbolic link" if stat.S_ISLNK(st.st_mode)
               else "it is not a regular file")
        raise OSError(errno.EEXIST, "cannot write %s: %s; gpumem writes only a "
                      "regular file there, and never through a link" % (path, why),
                      path)
    folder, name = os.path.split(path)
    # (the name cut to 100 characters, so that a long one still leaves room)
    tmp = os.path.join(folder, ".%s.gpumem-%d-%d.tmp"
                       % (name[:100], os.getpid(), next(_counter)))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
