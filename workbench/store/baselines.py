"""Named baselines: NAME -> run id, kept in STORE/baselines.json, one document for the whole set.

Every change is a read-modify-write of that document that cannot lose another writer's update.
On disk it runs under the store's lock (layout.store_lock) and replaces the file whole
(atomic.write_atomic). In a bucket (a store opened from s3://) the bucket's object is the only
copy: a change is a conditional PUT (If-None-Match to create it, If-Match on the ETag it was
read at), the same conditions incident records use; a writer that lost the race reads the
object again and re-applies its change, so two machines tagging at once both land. Names are
store identifiers (layout.check_id): no glob characters, slashes, '..', control characters,
Markdown or more than 64 characters ever reach a file, a terminal or a CI report.
"""

from __future__ import annotations

import os
import random
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from workbench.errors import WorkbenchError, describe_os_error
from workbench.store import objstore
from workbench.store.atomic import write_atomic
from workbench.store.layout import ID_RE, check_id, check_run_id, run_file, store_lock

FILE_NAME: Final[str] = "baselines.json"
SCHEMA_VERSION: Final[int] = 1
PREFIX: Final[str] = "baseline:"  # how --against names one
# What a document keeps of the past: the runs a name pointed to before (newest first) and the
# log of changes (newest last). Older entries are dropped so the document stays one small PUT.
KEEP_PREVIOUS: Final[int] = 100
KEEP_LOG: Final[int] = 1000
# A writer that lost a conditional PUT tries again on the fresh object, this many times.
MAX_ATTEMPTS: Final[int] = 12
_TMP_RE: Final[re.Pattern[str]] = re.compile(r"^\.baselines\.[0-9a-f]{32}\.tmp$")
_NAME_SHOWN: Final[int] = 40  # characters of an over-long name quoted in an error


class Tagging(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A run a baseline pointed to, who tagged it and when."""

    run_id: str
    tagged_by: str
    tagged_at: str


class Baseline(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One named baseline: the run it points to now and the runs it pointed to before."""

    name: str
    run_id: str
    tagged_by: str
    tagged_at: str
    previous: list[Tagging] = []  # newest first

    def describe(self) -> str:
        """One line: the name, its run, who tagged it and when."""
        who = f"tagged by {self.tagged_by} at {self.tagged_at}"
        return f"baseline {self.name}: run {self.run_id}, {who}"


class LogEntry(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One change to the set: tag (a new name), move (a name re-pointed) or rm."""

    at: str
    actor: str
    action: str
    name: str
    run_id: str | None = None
    previous_run_id: str | None = None


class BaselineSet(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The document: every baseline by name, a version counted up by each change, the log."""

    schema_version: int = SCHEMA_VERSION
    version: int = 0
    updated_at: str = ""
    baselines: dict[str, Baseline] = {}
    log: list[LogEntry] = []


@dataclass(frozen=True)
class Change:
    """What a tag or rm did: the baseline after (None after rm), before, and how many writes it
    took (more than one when another writer changed the set meanwhile)."""

    after: Baseline | None
    before: Baseline | None
    written: bool
    attempts: int


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_baseline_name(name: str) -> str:
    """name if it is a safe baseline name, else a one-line WorkbenchError (long names cut)."""
    if len(name) > 64:
        shown = repr(name[:_NAME_SHOWN])[:-1] + "...'"
        raise WorkbenchError(
            shown,
            f"invalid baseline name ({len(name)} characters; a letter, then up to 63 of letters, "
            "digits, '.', '_', '-')",
        )
    return check_id(name, "baseline")


def path_of(store: Path) -> Path:
    return store / FILE_NAME


def _check_doc(doc: BaselineSet, where: str) -> BaselineSet:
    """The document's own rules past its types: names and run ids safe, keys equal to names."""
    if doc.schema_version != SCHEMA_VERSION:
        raise WorkbenchError(
            where, f"baselines schema_version {doc.schema_version} is not {SCHEMA_VERSION}"
        )
    for key, b in doc.baselines.items():
        if not ID_RE.fullmatch(key) or ".." in key or key != b.name:
            raise WorkbenchError(where, f"bad baseline name {key!r} at $.baselines")
        for run in (b.run_id, *(p.run_id for p in b.previous)):
            if not ID_RE.fullmatch(run) or ".." in run:
                raise WorkbenchError(where, f"bad run id {run!r} at $.baselines.{key}")
    return doc


def decode(data: bytes, where: str) -> BaselineSet:
    """The document in `data`; a one-line WorkbenchError naming `where` and the bad place."""
    try:
        doc = msgspec.json.decode(data, type=BaselineSet)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        text = " ".join(str(exc).split())[:300]
        raise WorkbenchError(
            where, f"baselines file unreadable: {text}; restore it or fix it by hand"
        ) from None
    return _check_doc(doc, where)


def encode(doc: BaselineSet) -> bytes:
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def _read_local(store: Path) -> BaselineSet:
    """The document on disk (empty when there is none): a regular file, never through a
    symlink, a FIFO or anything past the size a conditional PUT can carry."""
    path = path_of(store)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return BaselineSet()
    except OSError as exc:
        if os.path.islink(path):
            raise WorkbenchError(
                str(path), "is a symbolic link, not the baselines file; move it away"
            ) from None
        raise WorkbenchError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkbenchError(str(path), "is not a regular file; move it away")
        if st.st_size > objstore.MAX_RECORD_BYTES:
            raise WorkbenchError(str(path), f"baselines file too large ({st.st_size} bytes)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read()
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return decode(data, str(path))


def _get_remote(fs: Any, key: str, where: str) -> tuple[BaselineSet, str | None]:
    """The bucket's document and the ETag it was read at (None: no document yet). The ETag is
    read first: a write in between then fails the If-Match instead of being overwritten."""
    try:
        etag = str(fs.info(key)["ETag"])
        data: bytes = fs.cat_file(key)
    except FileNotFoundError:
        return BaselineSet(), None
    if len(data) > objstore.MAX_RECORD_BYTES:
        raise WorkbenchError(where, f"baselines object too large ({len(data)} bytes)")
    return decode(data, where), etag


def _lost_race(exc: BaseException) -> bool:
    """Whether a conditional PUT failed because another writer got there first."""
    if isinstance(exc, FileExistsError) or objstore.precondition_failed(exc):
        return True
    response = getattr(exc.__cause__, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code == "ConditionalRequestConflict"  # S3's 409 for two conditional writes at once


def load(store: Path) -> BaselineSet:
    """Every baseline of the store (from the bucket for a store opened from s3://)."""
    remote = objstore.remote_of(store)
    if remote is None:
        if not store.is_dir():
            raise WorkbenchError(str(store), "store directory does not exist")
        return _read_local(store)
    try:
        return _get_remote(objstore.filesystem(), remote.key(FILE_NAME), remote.key(FILE_NAME))[0]
    except OSError as exc:
        raise objstore.remote_error(remote, exc) from exc


def get(store: Path, name: str) -> Baseline:
    """The baseline called `name`; a one-line error listing the names there are otherwise."""
    name = check_baseline_name(name)
    doc = load(store)
    found = doc.baselines.get(name)
    if found is None:
        known = ", ".join(sorted(doc.baselines)[:10]) or "none yet"
        raise WorkbenchError(repr(name), f"no such baseline in {store} (baselines: {known})")
    return found


def resolve(store: Path, spec: str) -> Baseline:
    """`baseline:NAME` -> the baseline, whose run must still be in the store."""
    if not spec.startswith(PREFIX):
        raise WorkbenchError(repr(spec), f"expected {PREFIX}NAME (a run id goes to --comparator)")
    found = get(store, spec[len(PREFIX) :])
    if not run_file(store, found.run_id).is_file():
        raise WorkbenchError(
            repr(found.name), f"baseline points to run {found.run_id!r}, which is not in the store"
        )
    return found


def _changed(doc: BaselineSet, baselines: dict[str, Baseline], entry: LogEntry) -> BaselineSet:
    return msgspec.structs.replace(
        doc,
        version=doc.version + 1,
        updated_at=entry.at,
        baselines=dict(sorted(baselines.items())),
        log=[*doc.log, entry][-KEEP_LOG:],
    )


Edit = Callable[[BaselineSet], tuple[BaselineSet | None, Change]]


def _apply(store: Path, edit: Edit) -> Change:
    """Run `edit` on the current document and save what it returns (None: nothing to write),
    without losing a concurrent writer's change; `edit` may run again on a fresher document."""
    remote = objstore.remote_of(store)
    if remote is None:
        return _apply_local(store, edit)
    key = remote.key(FILE_NAME)
    fs = objstore.filesystem()
    objstore.conditions_checked(remote.url)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            doc, etag = _get_remote(fs, key, key)
            new, change = edit(doc)
            if new is None:
                return change
            data = encode(new)
            if len(data) > objstore.MAX_RECORD_BYTES:
                raise WorkbenchError(key, "baselines too large for a single conditional write")
            if etag is None:
                fs.pipe_file(key, data, mode="create")
            else:
                fs.pipe_file(key, data, IfMatch=etag)
            return Change(change.after, change.before, True, attempt)
        except OSError as exc:
            if not _lost_race(exc):
                raise objstore.remote_error(remote, exc) from exc
        # Another writer changed the set between our read and our write: read it again.
        time.sleep(random.uniform(0.0, 0.02 * 2 ** min(attempt, 6)))
    raise WorkbenchError(
        key, f"conflict: the baselines changed {MAX_ATTEMPTS} times while saving; try again"
    )


def _apply_local(store: Path, edit: Edit) -> Change:
    if not store.is_dir():  # store_lock would create it
        raise WorkbenchError(str(store), "store directory does not exist")
    path = path_of(store)
    try:
        with store_lock(store):
            new, change = edit(_read_local(store))
            if new is None:
                return change
            data = encode(new)
            # Under the lock no other save is in flight: temporary files are a killed save's.
            for stale in store.glob(".baselines.*.tmp"):
                if _TMP_RE.fullmatch(stale.name):
                    stale.unlink(missing_ok=True)
            write_atomic(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise WorkbenchError(
            str(path), f"cannot save baselines: {describe_os_error(exc, 'store')}"
        ) from exc
    return Change(change.after, change.before, True, 1)


def tag(store: Path, name: str, run_id: str, actor: str, *, force: bool = False) -> Change:
    """Point `name` at `run_id` (which must be in the store). A name that points elsewhere
    moves only with `force`, keeping the run it pointed to, who tagged it and when."""
    name = check_baseline_name(name)
    run_id = check_run_id(run_id)
    if not actor.strip():
        raise WorkbenchError("baseline", "an actor is required (--actor)")
    if not run_file(store, run_id).is_file():
        if not store.is_dir():
            raise WorkbenchError(str(store), "store directory does not exist")
        raise WorkbenchError(repr(run_id), f"run is not in the store {store}")

    def edit(doc: BaselineSet) -> tuple[BaselineSet | None, Change]:
        old = doc.baselines.get(name)
        if old is not None and old.run_id == run_id:
            return None, Change(old, old, False, 1)  # already so: nothing written
        if old is not None and not force:
            raise WorkbenchError(
                repr(name),
                f"baseline already points to run {old.run_id!r} (tagged by {old.tagged_by} at "
                f"{old.tagged_at}); add --force to move it to {run_id!r}",
            )
        at = now_iso()
        previous: list[Tagging] = []
        if old is not None:
            was = Tagging(run_id=old.run_id, tagged_by=old.tagged_by, tagged_at=old.tagged_at)
            previous = [was, *old.previous][:KEEP_PREVIOUS]
        new = Baseline(name=name, run_id=run_id, tagged_by=actor, tagged_at=at, previous=previous)
        entry = LogEntry(
            at=at,
            actor=actor,
            action="move" if old is not None else "tag",
            name=name,
            run_id=run_id,
            previous_run_id=old.run_id if old is not None else None,
        )
        return _changed(doc, {**doc.baselines, name: new}, entry), Change(new, old, True, 1)

    return _apply(store, edit)


def remove(store: Path, name: str, actor: str) -> Change:
    """Remove the baseline `name` (the log keeps which run it pointed to, who removed it, when)."""
    name = check_baseline_name(name)

    def edit(doc: BaselineSet) -> tuple[BaselineSet | None, Change]:
        old = doc.baselines.get(name)
        if old is None:
            raise WorkbenchError(repr(name), f"no such baseline in {store}")
        rest = {k: v for k, v in doc.baselines.items() if k != name}
        entry = LogEntry(
            at=now_iso(), actor=actor, action="rm", name=name, previous_run_id=old.run_id
        )
        return _changed(doc, rest, entry), Change(None, old, True, 1)

    return _apply(store, edit)
