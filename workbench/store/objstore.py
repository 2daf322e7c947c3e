"""Stores on object storage (`s3://bucket/prefix`): same layout, same commit protocol.

Every command works on a local mirror of the bucket's store ($WORKBENCH_HOME/s3/...), filled
from exact per-run paths (one listing of runs/, then the files of each committed run; committed
run files never change, so each is fetched once). Writes go to the bucket: a committed run's
partition files first and its runs row last (a create-only PUT, so two committers cannot both
win); an incident record by a conditional PUT (If-None-Match for a new record, If-Match on the
ETag it was read at otherwise), so that no update is lost. A server that ignores conditions is
refused. Endpoint: WORKBENCH_S3_ENDPOINT, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL; keys and
region from the standard AWS variables and profiles.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, BinaryIO, Final

from workbench.errors import WorkbenchError
from workbench.store import schema
from workbench.store.atomic import write_atomic
from workbench.store.layout import ID_RE, incidents_dir, partition_dir, run_file
from workbench.store.workspace import state_home

SCHEME: Final[str] = "s3://"
MARKER: Final[str] = ".remote.json"  # in a mirror's root: the bucket URL and incident ETags
ENDPOINT_VARS: Final[tuple[str, ...]] = (
    "WORKBENCH_S3_ENDPOINT",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
)
# Conditional PUTs hold only for single-request uploads (multipart drops If-Match).
MAX_RECORD_BYTES: Final[int] = 32 * 2**20
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_PART = re.compile(r"^[A-Za-z0-9._-]+$")
ALL_TABLES: Final[tuple[str, ...]] = tuple(schema.PARTITIONED)


def is_remote(store: str | Path) -> bool:
    """Whether `store` names a bucket (s3://...) rather than a directory."""
    return str(store).startswith(SCHEME)


@dataclass(frozen=True)
class Remote:
    """A store in a bucket: `root` is bucket/prefix as s3fs spells paths."""

    url: str
    bucket: str
    prefix: str

    @property
    def root(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def key(self, rel: str) -> str:
        return f"{self.root}/{rel}"


def parse_url(url: str) -> Remote:
    """s3://bucket[/prefix] -> Remote; a one-line error for anything else."""
    rest = url[len(SCHEME) :] if is_remote(url) else ""
    bucket, _, prefix = rest.partition("/")
    parts = [p for p in prefix.split("/") if p]
    if not _BUCKET.fullmatch(bucket) or not all(
        _PREFIX_PART.fullmatch(p) and p not in (".", "..") for p in parts
    ):
        raise WorkbenchError(
            repr(url), "expected s3://BUCKET[/PREFIX] (prefix parts of letters, digits, . _ -)"
        )
    return Remote(
        f"{SCHEME}{bucket}" + ("/" + "/".join(parts) if parts else ""), bucket, "/".join(parts)
    )


def endpoint() -> str | None:
    """The S3 endpoint override from the environment, if any."""
    for var in ENDPOINT_VARS:
        if os.environ.get(var):
            return os.environ[var]
    return None


def filesystem() -> Any:
    """An s3fs filesystem on the configured endpoint; no listing cache (the store changes)."""
    import s3fs

    client_kwargs = {"endpoint_url": endpoint()} if endpoint() else {}
    return s3fs.S3FileSystem(
        client_kwargs=client_kwargs, use_listings_cache=False, skip_instance_cache=True
    )


def remote_error(remote: Remote, exc: BaseException) -> WorkbenchError:
    """A bucket call's failure as the one-line error naming the store."""
    return WorkbenchError(
        remote.url, f"object storage: {type(exc).__name__}: {exc}".splitlines()[0]
    )


def mirror_dir(remote: Remote) -> Path:
    """Where the local mirror of `remote` lives."""
    return state_home() / "s3" / remote.bucket / (remote.prefix or "_root")


def remote_of(store: Path) -> Remote | None:
    """The bucket `store` mirrors, or None for a plain directory."""
    marker = store / MARKER
    if not marker.is_file():
        return None
    return parse_url(str(json.loads(marker.read_text(encoding="utf-8"))["url"]))


def _marker(store: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((store / MARKER).read_text(encoding="utf-8"))
    return doc


def _save_marker(store: Path, doc: dict[str, Any]) -> None:
    write_atomic(store / MARKER, partial(_put, json.dumps(doc, indent=1, sort_keys=True).encode()))


def run_ids(fs: Any, remote: Remote) -> list[str]:
    """Committed runs in the bucket: one listing of runs/."""
    try:
        names = fs.ls(remote.key("runs"), detail=False)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise remote_error(remote, exc) from exc
    ids = (str(n).rsplit("/", 1)[-1] for n in names)
    return sorted(
        n[: -len(".parquet")] for n in ids if n.endswith(".parquet") and ID_RE.fullmatch(n[:-8])
    )


def _fetch(fs: Any, src: str, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex}.tmp")
    try:
        fs.get_file(src, str(tmp))
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def open_store(url: str, tables: Iterable[str] = ALL_TABLES) -> Path:
    """The local mirror of the store at `url`, brought up to date for `tables` of every
    committed run and for the incident records."""
    remote = parse_url(url)
    fs = filesystem()
    mirror = mirror_dir(remote)
    mirror.mkdir(parents=True, exist_ok=True)
    doc = _marker(mirror) if (mirror / MARKER).is_file() else {"url": remote.url, "etags": {}}
    if doc.get("url") != remote.url:
        raise WorkbenchError(str(mirror), f"mirror belongs to {doc.get('url')}, not {remote.url}")
    try:
        for rid in run_ids(fs, remote):
            local_row = run_file(mirror, rid)
            for table in tables:
                rel = partition_dir(Path(), table, rid)
                local = mirror / rel
                if local.is_dir():
                    continue  # committed run files never change: fetched once
                try:
                    names = fs.ls(remote.key(str(rel)), detail=False)
                except FileNotFoundError:
                    continue
                stage = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
                try:
                    for name in names:
                        _fetch(fs, str(name), stage / str(name).rsplit("/", 1)[-1])
                    stage.mkdir(parents=True, exist_ok=True)
                    os.replace(stage, local)
                finally:
                    if stage.exists():
                        for p in stage.iterdir():
                            p.unlink()
                        stage.rmdir()
            if not local_row.exists():
                _fetch(fs, remote.key(f"runs/{rid}.parquet"), local_row)
        doc["etags"] = _sync_incidents(fs, remote, mirror)
    except OSError as exc:
        raise remote_error(remote, exc) from exc
    _save_marker(mirror, doc)
    return mirror


def _put(data: bytes, fh: BinaryIO) -> None:
    fh.write(data)


def _sync_incidents(fs: Any, remote: Remote, mirror: Path) -> dict[str, str]:
    """Every incident record, with the ETag it was read at (ETag first: a write in between
    then fails its If-Match instead of being overwritten)."""
    etags: dict[str, str] = {}
    try:
        infos = fs.ls(remote.key("incidents"), detail=True)
    except FileNotFoundError:
        infos = []
    local_dir = incidents_dir(mirror)
    for info in infos:
        name = str(info["name"]).rsplit("/", 1)[-1]
        if not name.endswith(".json") or not ID_RE.fullmatch(name[:-5]):
            continue
        etag = str(fs.info(info["name"])["ETag"])
        data: bytes = fs.cat_file(info["name"])
        local_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(local_dir / name, partial(_put, data))
        etags[name] = etag
    return etags


def publish_run(store: Path, run_id: str, source: str) -> None:
    """Upload a run committed in the mirror `store`: partitions first, the runs row last and
    create-only. On any failure the bucket shows no such run (partitions without a runs row
    are invisible and replaced by the next commit) and WorkbenchError names `source`."""
    remote = remote_of(store)
    if remote is None:
        return
    fs = filesystem()
    try:
        for table in schema.PARTITIONED:
            rel = partition_dir(Path(), table, run_id)
            local = store / rel
            if not local.is_dir():
                continue
            for path in sorted(local.iterdir()):
                fs.put_file(str(path), remote.key(f"{rel}/{path.name}"))
        row = run_file(store, run_id).read_bytes()
        fs.pipe_file(remote.key(f"runs/{run_id}.parquet"), row, mode="create")
    except FileExistsError as exc:
        raise WorkbenchError(source, f"run {run_id!r} already exists in {remote.url}") from exc
    except OSError as exc:
        raise WorkbenchError(source, f"cannot write to store {remote.url}: {exc}") from exc


def precondition_failed(exc: BaseException) -> bool:
    """Whether S3 answered 412 PreconditionFailed (s3fs wraps it in an OSError)."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") == (
        "PreconditionFailed"
    )


def publish_run_or_undo(store: Path, run_id: str, source: str) -> None:
    """publish_run for a run just committed in the mirror `store`; if the bucket refuses it,
    the run leaves the mirror too (runs row first), so the mirror never shows more."""
    try:
        publish_run(store, run_id, source)
    except BaseException:
        run_file(store, run_id).unlink(missing_ok=True)
        for table in schema.PARTITIONED:
            shutil.rmtree(partition_dir(store, table, run_id), ignore_errors=True)
        raise


@cache
def conditions_checked(url: str) -> bool:
    """Probe once per process that the server honours If-None-Match (moto and AWS do)."""
    remote = parse_url(url)
    fs = filesystem()
    probe = remote.key(f".workbench-probe-{uuid.uuid4().hex}")
    try:
        fs.pipe_file(probe, b"1", mode="create")
        try:
            fs.pipe_file(probe, b"2", mode="create")
        except FileExistsError:
            return True
        finally:
            fs.rm_file(probe)
    except OSError as exc:
        raise remote_error(remote, exc) from exc
    raise WorkbenchError(
        remote.url,
        "this server ignores conditional writes (If-None-Match): incident records refused",
    )


def publish_record(store: Path, name: str, data: bytes, is_new: bool) -> None:
    """PUT incidents/<name> conditionally on the ETag the mirror read it at (If-None-Match for
    a new record); a record changed in the bucket since is a conflict, nothing written."""
    remote = remote_of(store)
    if remote is None:
        return
    if len(data) > MAX_RECORD_BYTES:
        raise WorkbenchError(name, "incident record too large for a single conditional write")
    conditions_checked(remote.url)
    doc = _marker(store)
    etags: dict[str, str] = doc.setdefault("etags", {})
    key = remote.key(f"incidents/{name}")
    fs = filesystem()
    try:
        if is_new or name not in etags:
            out = fs.pipe_file(key, data, mode="create")
        else:
            out = fs.pipe_file(key, data, IfMatch=etags[name])
    except FileExistsError as exc:
        raise WorkbenchError(name, f"conflict: {remote.url} already holds this incident") from exc
    except OSError as exc:
        if precondition_failed(exc):
            raise WorkbenchError(
                name,
                f"conflict: the record in {remote.url} changed since it was read; "
                "reload and apply your change again",
            ) from exc
        raise remote_error(remote, exc) from exc
    etags[name] = str(out["ETag"])
    _save_marker(store, doc)
