"""What a named input is, found out without opening it: a FIFO or device would block or
never end, and a symlink loop is not "no such file"."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from workbench.errors import WorkbenchError

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def check_input(path: Path, *, dirs: bool = True) -> os.stat_result:
    """stat of an input file (or directory when `dirs`); a one-line WorkbenchError naming the
    path when it is missing, a symlink loop, unreadable, or not a regular file."""
    subject = str(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise WorkbenchError(
                subject, "symbolic link loop (the link never reaches a file)"
            ) from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            if path.is_symlink():
                raise WorkbenchError(
                    subject, "broken symbolic link (its target does not exist)"
                ) from None
            raise WorkbenchError(subject, "no such file or directory") from None
        raise WorkbenchError(subject, f"cannot read: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(st.st_mode):
        if not dirs:
            raise WorkbenchError(subject, "is a directory; expected a file")
        return st
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise WorkbenchError(subject, f"is {kind}, not a regular file; give a file to read")
    if not os.access(path, os.R_OK):
        raise WorkbenchError(subject, "cannot read: permission denied")
    return st
