"""Writing a file the user named (`export -o FILE`): only a regular file, never into the store.

The path may come pasted over SSH, so it is checked before anything is written: a symlink, a
FIFO, a device or a folder at the path is refused (a rename would replace the link or the
special file; writing through it could block or land elsewhere), as is anything inside the
store (the export must never replace STORE/incidents/INC-1.json). An existing file is replaced
only when asked. The text goes to a temporary file beside the target, synced, then linked
(no replace) or renamed (replace) into place: never half a file.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from pathlib import Path

from workbench.errors import WorkbenchError, describe_os_error
from workbench.store.atomic import fsync_dir

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def _refuse_existing(path: Path, replace: bool) -> None:
    """Raise unless `path` is absent, or a regular file and `replace` is set."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot write there: {exc.strerror or exc}") from None
    kind = _KINDS.get(stat.S_IFMT(mode))
    if kind is not None:
        raise WorkbenchError(str(path), f"is {kind}, not a regular file; name a new file")
    if not replace:
        raise WorkbenchError(str(path), "exists; add --force to replace it")


def check_output_path(path: Path, store: Path | None, replace: bool) -> None:
    """Raise a one-line WorkbenchError unless `path` may receive the output."""
    _refuse_existing(path, replace)
    parent = path.parent
    if not parent.is_dir():
        raise WorkbenchError(str(path), f"cannot write export: folder {parent} does not exist")
    if store is not None:
        target = parent.resolve() / path.name
        root = store.resolve()
        if target == root or root in target.parents:
            raise WorkbenchError(str(path), f"is inside the store {store}; write it elsewhere")


def write_output(path: Path, text: str, store: Path | None = None, replace: bool = False) -> None:
    """Write `text` to `path` all or nothing, after check_output_path."""
    check_output_path(path, store, replace)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _place(tmp, path, replace)
        fsync_dir(path.parent)
    except OSError as exc:
        raise WorkbenchError(
            str(path), f"cannot write export: {describe_os_error(exc, 'the folder')}"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def _place(tmp: Path, path: Path, replace: bool) -> None:
    """Move tmp to path; without `replace`, never over a file that appeared meanwhile."""
    if not replace:
        try:
            os.link(tmp, path)  # fails if path exists: an atomic "create, do not replace"
            return
        except FileExistsError:
            raise WorkbenchError(str(path), "exists; add --force to replace it") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
    _refuse_existing(path, replace)  # the last look before the rename
    os.replace(tmp, path)
