"""Where the hooks keep their state and read their settings, and the guard those settings make.

- Settings: ``$TRIPWIRE_CONFIG``, else ``$XDG_CONFIG_HOME/tripwire/config.toml`` (by default
  ``~/.config/tripwire/config.toml``). Optional; every key has the guard's default::

      [guard]
      window = 12          # recent calls remembered
      nudge_at = 2         # repeats that refuse the call, with a message to the model
      stop_at = 3          # repeats that end the run
      max_steps = 2000     # a budget of tool calls per session (none by default)
      volatile_keys = ["request_id", "timestamp"]   # replaces the default set

      [tools]              # policies, as Guard(tools=...) takes them
      deploy = "write"
      build_status = { policy = "poll", max_polls = 30 }

      [state]
      ttl_hours = 168      # sessions untouched this long are removed

- State: ``$TRIPWIRE_STATE_DIR``, else ``$XDG_STATE_HOME/tripwire`` (by default
  ``~/.local/state/tripwire``), a 0700 directory of 0600 files.

A settings file that cannot be read or is invalid is reported (one line on stderr) and the
defaults are used: a typo must not leave the agent unguarded, nor stop it.
"""

from __future__ import annotations

import os
from typing import Any, Final

DEFAULT_TTL_HOURS: Final = 168.0
_GUARD_KEYS: Final = frozenset({"window", "nudge_at", "stop_at", "max_steps", "volatile_keys"})


def _xdg(variable: str, fallback: str) -> str:
    base = os.environ.get(variable, "")
    if not os.path.isabs(base):  # the XDG spec: relative paths are ignored
        base = os.path.join(os.path.expanduser("~"), fallback)
    return base


def config_path() -> str:
    explicit = os.environ.get("TRIPWIRE_CONFIG")
    if explicit:
        return explicit
    return os.path.join(_xdg("XDG_CONFIG_HOME", ".config"), "tripwire", "config.toml")


def state_dir() -> str:
    explicit = os.environ.get("TRIPWIRE_STATE_DIR")
    if explicit:
        return explicit
    return os.path.join(_xdg("XDG_STATE_HOME", os.path.join(".local", "state")), "tripwire")


class Settings:
    """The guard's keyword arguments and the state's lifetime, from the settings file.
    (A plain class: ``dataclasses`` imports ``inspect``, 5 ms a hook process.)"""

    __slots__ = ("guard", "ttl_hours", "warnings")

    def __init__(self, warnings: list[str] | None = None) -> None:
        self.guard: dict[str, Any] = {}
        self.ttl_hours = DEFAULT_TTL_HOURS
        self.warnings: list[str] = warnings or []

    def make_guard(self) -> Any:
        import tripwire

        return tripwire.Guard(**self.guard)


def _parse(data: dict[str, Any], path: str) -> Settings:
    settings = Settings()
    guard = data.get("guard", {})
    tools = data.get("tools")
    state = data.get("state", {})
    if not isinstance(guard, dict) or not isinstance(state, dict):
        raise ValueError("[guard] and [state] must be tables")
    unknown = set(guard) - _GUARD_KEYS
    if unknown:
        raise ValueError(f"[guard]: unknown keys {', '.join(sorted(unknown))}")
    settings.guard = dict(guard)
    if tools is not None:
        if not isinstance(tools, dict):
            raise ValueError("[tools] must be a table of tool name -> policy")
        settings.guard["tools"] = tools
    ttl = state.get("ttl_hours", DEFAULT_TTL_HOURS)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ValueError("[state] ttl_hours must be a positive number")
    settings.ttl_hours = float(ttl)
    settings.make_guard()  # the guard's own checks, with its own messages
    return settings


def load_settings(path: str | None = None) -> Settings:
    path = config_path() if path is None else path
    try:
        with open(path, "rb") as file:
            raw = file.read(1 << 20)
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        return Settings(warnings=[f"{path}: cannot read ({exc.strerror or exc}); defaults used"])
    try:
        import tomllib

        return _parse(tomllib.loads(raw.decode("utf-8")), path)
    except Exception as exc:
        return Settings(warnings=[f"{path}: {exc}; defaults used"])
