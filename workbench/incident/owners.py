"""Owners: the roster (role -> people), which roles an incident involves, follow-up actions."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from accel.stages import DEFAULT_OWNER_ROLE
from workbench.errors import WorkbenchError
from workbench.incident.incident import Action, Incident

ROSTER_FILE = "roster.toml"
ACTION_STATUSES = ("open", "done", "dropped")


@dataclass(frozen=True)
class Role:
    name: str
    artifact: str  # the closure artifact this role delivers
    people: tuple[str, ...]


@dataclass(frozen=True)
class Roster:
    source: str
    roles: dict[str, Role]

    def role(self, name: str) -> Role:
        if name not in self.roles:
            raise WorkbenchError(
                repr(name), f"unknown role in {self.source} (one of {', '.join(self.roles)})"
            )
        return self.roles[name]


@dataclass(frozen=True)
class Proposal:
    role: str
    person: str | None
    artifact: str
    reason: str


def default_roster_path() -> Path:
    return Path(__file__).with_name("roster.default.toml")


def _parse(path: Path, text: str, fallback: Roster | None) -> Roster:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(str(path), f"malformed roster TOML: {exc}") from exc
    table = doc.get("roles")
    if not isinstance(table, dict) or not table:
        raise WorkbenchError(str(path), 'roster has no [roles."<role>"] tables')
    roles: dict[str, Role] = {}
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise WorkbenchError(str(path), f"role {name!r} is not a table")
        people = entry.get("people", [])
        if not isinstance(people, list) or not all(isinstance(p, str) and p for p in people):
            raise WorkbenchError(str(path), f"role {name!r}: people must be a list of names")
        artifact = entry.get("artifact")
        if artifact is None and fallback is not None and name in fallback.roles:
            artifact = fallback.roles[name].artifact
        if not isinstance(artifact, str) or not artifact:
            raise WorkbenchError(str(path), f"role {name!r} names no closure artifact")
        roles[name] = Role(name=name, artifact=artifact, people=tuple(people))
    if fallback is not None:
        # A team roster may list only the roles it staffs; the others keep their artifact.
        for name, role in fallback.roles.items():
            roles.setdefault(name, role)
    return Roster(source=str(path), roles=roles)


def load_roster(store: Path | None = None, path: Path | None = None) -> Roster:
    """The roster from `path`, else STORE/roster.toml, else the shipped default (no people)."""
    default_path = default_roster_path()
    default = _parse(default_path, default_path.read_text(encoding="utf-8"), None)
    chosen = path or (store / ROSTER_FILE if store is not None else None)
    if chosen is None or (path is None and not chosen.exists()):
        return default
    try:
        text = chosen.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkbenchError(str(chosen), f"cannot read roster: {exc.strerror or exc}") from exc
    return _parse(chosen, text, default)


def roles_involved(inc: Incident) -> list[str]:
    """The origin stage's role first (owners follow the origin), then the manifest stage's."""
    loc = inc.localization
    if loc is None:
        return []
    roles = [DEFAULT_OWNER_ROLE[s] for s in (loc.origin, loc.manifest) if s in DEFAULT_OWNER_ROLE]
    return list(dict.fromkeys(roles))


def propose_owners(inc: Incident, roster: Roster) -> list[Proposal]:
    """One proposal per involved role, origin's role first; person None when nobody is listed."""
    assigned = {o.role: o.person for o in inc.owners}
    loc = inc.localization
    out = []
    for role_name in roles_involved(inc):
        role = roster.role(role_name)
        why = []
        if loc is not None and DEFAULT_OWNER_ROLE.get(loc.origin) == role_name:
            why.append(f"owns the origin stage {loc.origin}")
        if loc is not None and DEFAULT_OWNER_ROLE.get(loc.manifest) == role_name:
            why.append(f"owns the manifest stage {loc.manifest}")
        person = assigned.get(role_name) or (role.people[0] if role.people else None)
        out.append(Proposal(role_name, person, role.artifact, " and ".join(why)))
    return out


def parse_due(text: str) -> str:
    """An ISO date (YYYY-MM-DD), checked."""
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise WorkbenchError(repr(text), "due date must be YYYY-MM-DD") from None


def overdue_actions(inc: Incident, today: date) -> list[Action]:
    """Open actions whose due date has passed."""
    return [a for a in inc.actions if a.status == "open" and date.fromisoformat(a.due) < today]
