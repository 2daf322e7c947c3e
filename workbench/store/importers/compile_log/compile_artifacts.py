"""What a TORCH_TRACE log says about one compilation besides its metrics: graph breaks (with
the user frame and line), FX-graph / AOTAutograd cache outcomes, restarts.

Artifacts come before the compilation_metrics record of their compilation; `Pending` collects
them per compile id until that record arrives (a log may compile the same id again after a
reset, as tlparse's cache test does).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_CACHE_ARTIFACT = re.compile(r"^(fx_graph|aotautograd)_cache_(hit|miss|bypass)$")
_WHERE = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)\s*$")
# The generic first line torch >= 2.7 writes before the specific reason.
_GENERIC = re.compile(r"^Encountered graph break when attempting to trace")
_SECTION_END = re.compile(r"^\s*(Explanation:|Hint:|Developer debug context:|User code traceback:)")


@dataclass(frozen=True)
class GraphBreak:
    """One graph break: where in user code, why, torch's hint, and the line of code."""

    file: str | None
    line: int | None
    reason: str
    hint: str | None = None
    code: str | None = None

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "(unknown frame)"


@dataclass
class Pending:
    """Artifacts of one compile id seen since its last compilation_metrics record."""

    fx_graph_cache: str | None = None
    aot_autograd_cache: str | None = None
    breaks: list[GraphBreak] = field(default_factory=list)

    def add_artifact(self, name: str, payload: list[bytes]) -> None:
        m = _CACHE_ARTIFACT.match(name)
        if m is not None:
            if m.group(1) == "fx_graph":
                self.fx_graph_cache = m.group(2)
            else:
                self.aot_autograd_cache = m.group(2)
        elif name == "dynamo_graph_break_reason":
            gb = parse_graph_break(payload)
            if gb is not None and gb not in self.breaks:
                self.breaks.append(gb)

    def cache_hit(self) -> bool | None:
        """All looked-up caches hit: True; any miss: False; only bypasses or none: None."""
        states = [s for s in (self.fx_graph_cache, self.aot_autograd_cache) if s in ("hit", "miss")]
        if not states:
            return None
        return all(s == "hit" for s in states)

    def breaks_json(self) -> str | None:
        return json.dumps([b.as_json() for b in self.breaks]) if self.breaks else None


def parse_graph_break(payload: list[bytes]) -> GraphBreak | None:
    """A dynamo_graph_break_reason payload -> GraphBreak (None when it has no reason line)."""
    lines = [b.decode("utf-8", errors="replace") for b in payload]
    file: str | None = None
    line_no: int | None = None
    reason: str | None = None
    hint: str | None = None
    code: str | None = None
    for i, text in enumerate(lines):
        m = _WHERE.search(text)
        if m is not None and file is None:
            file, line_no = m.group("file"), int(m.group("line"))
        if text.startswith("Graph Break Reason:") and reason is None:
            reason = text.split(":", 1)[1].strip()
            if _GENERIC.match(reason):
                # The specific reason is the next non-empty line before torch's sections.
                for nxt in lines[i + 1 :]:
                    if _SECTION_END.match(nxt):
                        break
                    if nxt.strip():
                        reason = nxt.strip()
                        break
        stripped = text.strip()
        if stripped.startswith("Hint:") and hint is None:
            hint = stripped[len("Hint:") :].strip()
    if reason is None:
        return None
    code = _user_code_line(lines, file, line_no)
    return GraphBreak(file, line_no, reason, hint, code)


def _user_code_line(lines: list[str], file: str | None, line_no: int | None) -> str | None:
    """The source line the traceback prints under the break's own frame."""
    if file is None:
        return None
    frame = f'File "{file}", line {line_no},'
    for i, text in enumerate(lines[:-1]):
        if frame in text:
            return lines[i + 1].strip() or None
    return None


def restart_reasons(value: object) -> list[str]:
    """compilation_metrics restart_reasons: a list (or set printed as list) of strings."""
    if not isinstance(value, list):
        return []
    return [str(v).strip().splitlines()[0] for v in value if str(v).strip()]
