"""Settings in Claude Code's shape, which Gemini CLI and Codex CLI share: ``hooks`` maps an
event to a list of groups, each ``{"matcher": ..., "hooks": [hook, ...]}``. Adding tripwire's
hooks and taking them out again, leaving every other hook as it was."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def remove(settings: dict[str, Any], is_ours: Callable[[Any], bool]) -> dict[str, Any]:
    """``settings`` without tripwire's hooks; everything else as it was."""
    result = dict(settings)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return result
    kept_events: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept_events[event] = groups
            continue
        kept_groups = []
        for group in groups:
            entries = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(entries, list) or not any(is_ours(h) for h in entries):
                kept_groups.append(group)
                continue
            others = [h for h in entries if not is_ours(h)]
            if others:
                kept_groups.append({**group, "hooks": others})
        if kept_groups or not groups:
            kept_events[event] = kept_groups
    if kept_events:
        result["hooks"] = kept_events
    else:
        del result["hooks"]
    return result


def add(
    settings: dict[str, Any],
    events: Iterable[str],
    hook: dict[str, Any],
    is_ours: Callable[[Any], bool],
    matchers: dict[str, str],
) -> dict[str, Any]:
    """``settings`` with ``hook`` on each event (a matcher where ``matchers`` names one),
    replacing tripwire's hooks already there: installing twice is installing once."""
    result = remove(settings, is_ours)
    if "hooks" in result and not isinstance(result["hooks"], dict):
        raise ValueError('its "hooks" is not an object')
    hooks = dict(result.get("hooks") or {})
    for event in events:
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise ValueError(f'its "hooks.{event}" is not an array')
        group: dict[str, Any] = {"hooks": [hook]}
        if event in matchers:
            group = {"matcher": matchers[event], **group}
        hooks[event] = [*groups, group]
    result["hooks"] = hooks
    return result


def flat_remove(settings: dict[str, Any], is_ours: Callable[[Any], bool]) -> dict[str, Any]:
    """Copilot's and Cursor's shape, ``hooks`` mapping an event to a flat list of hooks."""
    result = dict(settings)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return result
    kept: dict[str, Any] = {}
    for event, entries in hooks.items():
        if not isinstance(entries, list):
            kept[event] = entries
            continue
        others = [h for h in entries if not is_ours(h)]
        if others or not entries:
            kept[event] = others
    if kept:
        result["hooks"] = kept
    else:
        del result["hooks"]
    return result


def flat_add(
    settings: dict[str, Any],
    events: Iterable[str],
    hook: dict[str, Any],
    is_ours: Callable[[Any], bool],
) -> dict[str, Any]:
    result = flat_remove(settings, is_ours)
    if "hooks" in result and not isinstance(result["hooks"], dict):
        raise ValueError('its "hooks" is not an object')
    hooks = dict(result.get("hooks") or {})
    for event in events:
        entries = hooks.get(event, [])
        if not isinstance(entries, list):
            raise ValueError(f'its "hooks.{event}" is not an array')
        hooks[event] = [*entries, hook]
    result["hooks"] = hooks
    return result


def command_is(command: Any, harness: str) -> bool:
    """A hook command ``tripwire install`` wrote for ``harness``."""
    import re

    return isinstance(command, str) and (
        re.search(rf"tripwire\S*\s+hook\s+{re.escape(harness)}(\s|$)", command) is not None
    )
