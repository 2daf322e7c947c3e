"""--request-pattern: the user's regular expression for request spans, at a bounded cost.

Python's re backtracks: `(a+)+$`, or even `\\w+x`, on a 1 MB span name runs for minutes. Span
names are matched with RE2 (through pyarrow), whose time is linear in the text; a pattern RE2
cannot run (backreferences, lookaround) is refused up front with a one-line error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from workbench.errors import WorkbenchError


def compile_pattern(text: str | None) -> re.Pattern[str] | None:
    """The pattern, checked by both engines (re for its messages, RE2 for what runs)."""
    if text is None:
        return None
    subject = f"--request-pattern {text!r}"
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise WorkbenchError(subject, f"bad regex: {exc}") from exc
    try:
        pc.match_substring_regex(pa.array([""], pa.string()), pattern=text)
    except pa.ArrowInvalid as exc:
        raise WorkbenchError(
            subject,
            "not supported: patterns run in linear time (RE2 syntax), without backreferences "
            f"or lookaround ({str(exc).splitlines()[0]})",
        ) from exc
    return pattern


def matches(pattern: re.Pattern[str], names: Sequence[str | None]) -> npt.NDArray[np.bool_]:
    """Whether each name holds a match (search semantics); None never matches."""
    found = pc.match_substring_regex(pa.array(names, pa.string()), pattern=pattern.pattern)
    return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=np.bool_)
