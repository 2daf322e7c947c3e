"""Incident Workbench: triage accelerator performance regressions from traces to closure.
Floors, lowest first: accel (numpy only), store, sample, triage, incident, api, cli, tui; imports
point down."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.api import open as open

__version__ = "0.1.0"


# workbench.open is the Python API's entry (workbench/api); imported on first use, so that
# `import workbench` (the CLI's and the app's first import) stays as light as it was.
_API_NAMES = ("open",)


def __getattr__(name: str) -> object:
    if name in _API_NAMES:
        from workbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API_NAMES])
