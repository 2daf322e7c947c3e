"""Writing the export's images into the folder beside it, together with the export itself.

The folder gets the checks the export file gets (output_file.py): never a symlink, a FIFO or
another non-folder, never in the store (nor the store itself or a folder above it), an existing
one replaced only when asked, and then only if it holds nothing but this export's images (a
folder of the user's is never deleted). The images are written into a hidden folder beside it,
synced, and swapped in; the export file is written next, and if that fails the old folder comes
back: the Markdown and its images change together or not at all.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from workbench.errors import WorkbenchError, describe_os_error
from workbench.store.atomic import fsync_dir


def _ours(folder: Path, names: Iterable[str]) -> str | None:
    """None if `folder` holds only regular files named in `names`, else the first other entry."""
    allowed = set(names)
    with os.scandir(folder) as entries:
        for e in sorted(entries, key=lambda e: e.name):
            if e.name not in allowed or not e.is_file(follow_symlinks=False):
                return e.name
    return None


def check_folder(folder: Path, store: Path | None, replace: bool, names: Iterable[str]) -> bool:
    """Raise a one-line WorkbenchError unless `folder` may receive the images; True if it
    exists (and may be replaced)."""
    if store is not None:
        target = folder.parent.resolve() / folder.name
        root = store.resolve()
        if target == root or root in target.parents or target in root.parents:
            raise WorkbenchError(str(folder), f"is inside the store {store}; write it elsewhere")
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise WorkbenchError(str(folder), f"cannot write there: {exc.strerror or exc}") from None
    if stat.S_ISLNK(mode):
        raise WorkbenchError(str(folder), "is a symbolic link, not a folder; move it away")
    if not stat.S_ISDIR(mode):
        raise WorkbenchError(str(folder), "is not a folder; move it away to export images there")
    if not replace:
        raise WorkbenchError(str(folder), "exists; add --force to replace it")
    try:
        other = _ours(folder, names)
    except OSError as exc:
        raise WorkbenchError(str(folder), f"cannot read it: {exc.strerror or exc}") from None
    if other is not None:
        raise WorkbenchError(
            str(folder), f"holds {other!r}, not only an export's images; move it away"
        )
    return True


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_with_folder(
    folder: Path,
    files: dict[str, bytes],
    store: Path | None,
    replace: bool,
    write_main: Callable[[], None],
    names: Iterable[str],
) -> None:
    """Put `files` (name -> bytes) in `folder` and run `write_main` (the export file's own
    all-or-nothing write), both or neither. No files: an existing `folder` (one of ours, as
    check_folder allows only that) held an earlier export's images and is removed."""
    names = frozenset(names) | frozenset(files)
    exists = check_folder(folder, store, replace, names)
    if not files:
        write_main()
        if exists:  # one of ours (checked), holding an earlier export's images
            shutil.rmtree(folder, ignore_errors=True)
        return
    tag = uuid.uuid4().hex
    new = folder.with_name(f".{folder.name}.{tag}.tmp")
    old = folder.with_name(f".{folder.name}.{tag}.old")
    moved = placed = False
    try:
        os.mkdir(new)
        for name, data in sorted(files.items()):
            _write_file(new / name, data)
        fsync_dir(new)
        exists = check_folder(folder, store, replace, names)  # the last look before the swap
        try:
            if exists:
                os.rename(folder, old)
                moved = True
            os.rename(new, folder)
            placed = True
            fsync_dir(folder.parent)
            write_main()
        except BaseException:
            if placed:
                shutil.rmtree(folder, ignore_errors=True)
            if moved:
                os.rename(old, folder)
            raise
    except OSError as exc:
        raise WorkbenchError(
            str(folder), f"cannot write the images: {describe_os_error(exc, 'the folder')}"
        ) from None
    finally:
        shutil.rmtree(new, ignore_errors=True)
    if moved:
        shutil.rmtree(old, ignore_errors=True)
