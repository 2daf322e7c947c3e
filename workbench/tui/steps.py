"""The seven steps as screens: the class that shows each, its title, where an incident resumes."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from workbench.tui.widgets.incident_header import STEPS

if TYPE_CHECKING:
    from workbench.incident.incident import Incident
    from workbench.tui.screens.step_screen import StepScreen

# mode -> "<key> <title>": where "Resuming ... at <screen>" says the app returns.
STEP_TITLES = {mode: f"{key} {title}" for mode, key, title in STEPS}

# mode -> (module in workbench.tui, screen class)
SCREENS: dict[str, tuple[str, str]] = {
    "runs": ("runs_screen", "RunsScreen"),
    "pair": ("pair_screen", "PairScreen"),
    "evidence": ("evidence_screen", "EvidenceScreen"),
    "localize": ("localize_screen", "LocalizeScreen"),
    "owners": ("owners_screen", "OwnersScreen"),
    "validate": ("validate_screen", "ValidateScreen"),
    "close": ("close_screen", "CloseScreen"),
}

# incident status -> the step where work on it continues
RESUME_AT: dict[str, str] = {
    "declared": "pair",
    "paired": "evidence",
    "localized": "localize",
    "classified": "owners",
    "assigned": "validate",
    "validating": "validate",
    "closed": "close",
}


def screen_class(mode: str) -> type[StepScreen]:
    """The screen class of a step, imported on first use."""
    module, name = SCREENS[mode]
    cls: type[StepScreen] = getattr(
        importlib.import_module(f"workbench.tui.screens.{module}"), name
    )
    return cls


def new_screen(mode: str) -> StepScreen:
    return screen_class(mode)()


def resume_step(inc: Incident | None) -> str | None:
    """The screen where work on an incident in this status continues."""
    return None if inc is None else RESUME_AT.get(inc.status)
