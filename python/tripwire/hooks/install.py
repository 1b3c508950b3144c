"""``tripwire install HARNESS`` / ``tripwire uninstall HARNESS``: tripwire's hooks merged into
the harness's settings file, and taken out again.

- Everything else in the file is kept as it was (keys, their order, other hooks); the file is
  rewritten with two-space indentation.
- Installing twice is installing once: tripwire's entries are replaced, not added again.
- The file as it was is copied to ``<file>.tripwire-backup`` before it is changed; the new
  file is written to a temporary file and renamed over it (its mode kept).
- Uninstall removes exactly the entries install wrote (recognised by their command, or their
  URL and secret header), and the ``TRIPWIRE_SECRET`` it set.
- A file that is not a JSON object is refused with a clear error; nothing is written.

``--serve URL`` writes ``http`` hooks that POST to ``tripwire serve``, with a secret header
``X-Tripwire-Secret: $TRIPWIRE_SECRET`` (Claude Code interpolates the variables listed in
``allowedEnvVars``). The secret is made once, kept in ``<state dir>/serve-secret`` (0600)
where ``serve`` reads it, and set in the settings file's ``env`` (user and local scopes; the
project's shared file gets no secret: set ``TRIPWIRE_SECRET`` in the environment instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import sys
from typing import Any, Final

from tripwire.hooks import harness
from tripwire.hooks._config import state_dir
from tripwire.hooks._store import _private_dir

BACKUP_SUFFIX: Final = ".tripwire-backup"
SECRET_FILE: Final = "serve-secret"


class SettingsError(ValueError):
    """A settings file that cannot be changed safely."""


def default_command(name: str) -> str:
    """This tripwire's hook command, by its full path (the harness's shell may not have this
    environment's PATH): the ``tripwire`` script beside this interpreter where there is one
    (``python -m`` costs the hook ~1 ms more, for runpy), else ``python -m tripwire``."""
    script = os.path.join(os.path.dirname(sys.executable), "tripwire")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return f"{shlex.quote(script)} hook {name}"
    return f"{shlex.quote(sys.executable)} -m tripwire hook {name}"


def read_settings(path: str) -> tuple[dict[str, Any], bytes | None]:
    """The settings object and the file's bytes (``None``: no file yet)."""
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        return {}, raw
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: not UTF-8 text; nothing was written") from None
    except ValueError as exc:
        raise SettingsError(f"{path}: not valid JSON ({exc}); nothing was written") from None
    except RecursionError:
        raise SettingsError(f"{path}: nested too deep; nothing was written") from None
    if not isinstance(data, dict):
        raise SettingsError(
            f"{path}: a JSON {type(data).__name__}, not an object; nothing was written"
        )
    return data, raw


def write_settings(path: str, settings: dict[str, Any], old: bytes | None) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    mode = 0o644
    if old is not None:
        mode = os.stat(path).st_mode & 0o777
        with open(path + BACKUP_SUFFIX, "wb") as backup:
            backup.write(old)
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def serve_secret(create: bool) -> str | None:
    """The secret ``serve`` requires (made on first use when ``create``)."""
    path = os.path.join(state_dir(), SECRET_FILE)
    with contextlib.suppress(FileNotFoundError):
        with open(path, encoding="ascii") as file:
            found = file.read().strip()
        if found:
            return found
    if not create:
        return None
    _private_dir(state_dir())
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(value + "\n")
    return value


def _with_secret(settings: dict[str, Any], variable: str, value: str | None) -> dict[str, Any]:
    result = dict(settings)
    env = result.get("env")
    if env is not None and not isinstance(env, dict):
        raise SettingsError('its "env" is not a JSON object')
    env = dict(env or {})
    if value is None:
        if variable not in env:
            return result
        del env[variable]
    else:
        env[variable] = value
    if env:
        result["env"] = env
    else:
        result.pop("env", None)
    return result


def installed(
    name: str, settings: dict[str, Any], command: str | None, url: str | None, secret: str | None
) -> dict[str, Any]:
    protocol = harness(name)
    try:
        result: dict[str, Any] = protocol.add_hooks(settings, command, url)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    variable = getattr(protocol, "SECRET_VARIABLE", None)
    if url is not None and secret is not None and variable is not None:
        result = _with_secret(result, variable, secret)
    return result


def uninstalled(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    protocol = harness(name)
    result: dict[str, Any] = protocol.remove_hooks(settings)
    env = settings.get("env")
    variable = getattr(protocol, "SECRET_VARIABLE", None)
    if isinstance(env, dict) and variable is not None and variable in env:
        result = _with_secret(result, variable, None)
    return result


def run(args: Any) -> int:
    protocol = harness(args.harness)
    path = protocol.settings_file(args.scope, os.path.abspath(args.project))
    try:
        settings, old = read_settings(path)
        if args.command == "install":
            command = None
            if args.serve is None:
                command = args.hook_command or default_command(args.harness)
                if args.redis:
                    command += f" --redis {shlex.quote(args.redis)}"
            secret = None
            if args.serve is not None:
                made = serve_secret(create=not args.dry_run) or "<made on install>"
                secret = made if args.scope != "project" else None
            new = installed(args.harness, settings, command, args.serve, secret)
        else:
            new = uninstalled(args.harness, settings)
    except SettingsError as exc:
        message = str(exc)
        if not message.startswith(path):
            message = f"{path}: {message}; nothing was written"
        sys.stderr.write(f"tripwire {args.command}: {message}\n")
        return 1
    verb = "installed in" if args.command == "install" else "removed from"
    if new == settings:
        sys.stdout.write(f"tripwire: nothing to change in {path}\n")
        return 0
    if args.dry_run:
        sys.stdout.write(f"# {path} (dry run: nothing written)\n")
        sys.stdout.write(json.dumps(new, indent=2, ensure_ascii=False) + "\n")
        return 0
    try:
        write_settings(path, new, old)
    except OSError as exc:
        sys.stderr.write(f"tripwire {args.command}: {path}: {exc.strerror or exc}\n")
        return 1
    sys.stdout.write(f"tripwire: hooks {verb} {path}")
    sys.stdout.write(f" (the file as it was: {path}{BACKUP_SUFFIX})\n" if old else "\n")
    if args.command == "install" and args.serve is not None and args.scope == "project":
        sys.stdout.write(
            "tripwire: set TRIPWIRE_SECRET to the contents of "
            f"{os.path.join(state_dir(), SECRET_FILE)} where Claude Code runs\n"
        )
    return 0
