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


TOML_BEGIN: Final = "# >>> tripwire hooks (`tripwire uninstall codex` removes this block)"
TOML_END: Final = "# <<< tripwire hooks"


def _toml(path: str, text: str) -> dict[str, Any]:
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML ({exc}); nothing was written") from None
    return data


def toml_removed(path: str, text: str) -> str:
    """config.toml without tripwire's block (the lines between its markers), byte for byte
    as it was otherwise."""
    lines = text.splitlines(keepends=True)
    begin = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == TOML_BEGIN]
    if not begin:
        return text
    start = begin[0]
    end = next((i for i in range(start, len(lines)) if lines[i].rstrip("\r\n") == TOML_END), None)
    if end is None:
        raise SettingsError(f"{path}: tripwire's block has no end marker; nothing was written")
    if start > 0 and lines[start - 1].strip() == "":
        start -= 1  # the blank line install put before the block
    return "".join(lines[:start] + lines[end + 1 :])


def toml_installed(path: str, text: str, command: str | None, url: str | None) -> str:
    protocol = harness("codex")
    _toml(path, text)
    base = toml_removed(path, text)
    try:
        block = protocol.toml_block(command, url)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if base and not base.endswith("\n"):
        base += "\n"
    joined = f"{base}{chr(10) if base else ''}{TOML_BEGIN}\n{block}{TOML_END}\n"
    data = _toml(path, joined)
    hooks = data.get("hooks", {}).get("PreToolUse", [])
    if not any(protocol.is_ours(h) for g in hooks for h in g.get("hooks", [])):
        raise SettingsError(f"{path}: its [hooks] cannot take tripwire's; nothing was written")
    return joined


def _run_toml(args: Any, path: str) -> int:
    try:
        with open(path, "rb") as file:
            raw: bytes | None = file.read()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        sys.stderr.write(f"tripwire {args.command}: {path}: {exc.strerror or exc}\n")
        return 1
    try:
        text = (raw or b"").decode("utf-8")
    except UnicodeDecodeError:
        sys.stderr.write(f"tripwire {args.command}: {path}: not UTF-8 text; nothing was written\n")
        return 1
    try:
        if args.command == "install":
            if args.serve is not None:
                raise SettingsError(f"{path}: Codex CLI runs command hooks only (no --serve)")
            command = args.hook_command or default_command(args.harness)
            if args.redis:
                command += f" --redis {shlex.quote(args.redis)}"
            new = toml_installed(path, text, command, None)
        else:
            _toml(path, text)
            new = toml_removed(path, text)
    except SettingsError as exc:
        sys.stderr.write(f"tripwire {args.command}: {exc}\n")
        return 1
    return _write_text(args, path, text, new, raw)


def _write_text(args: Any, path: str, text: str, new: str, raw: bytes | None) -> int:
    if new == text:
        sys.stdout.write(f"tripwire: nothing to change in {path}\n")
        return 0
    if args.dry_run:
        sys.stdout.write(f"# {path} (dry run: nothing written)\n{new}")
        return 0
    try:
        _write_bytes(path, new.encode("utf-8"), raw)
    except OSError as exc:
        sys.stderr.write(f"tripwire {args.command}: {path}: {exc.strerror or exc}\n")
        return 1
    verb = "installed in" if args.command == "install" else "removed from"
    sys.stdout.write(f"tripwire: hooks {verb} {path}")
    sys.stdout.write(f" (the file as it was: {path}{BACKUP_SUFFIX})\n" if raw else "\n")
    return 0


def _write_bytes(path: str, data: bytes, old: bytes | None, mode: int = 0o644) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    if old is not None:
        mode = os.stat(path).st_mode & 0o777
        with open(path + BACKUP_SUFFIX, "wb") as backup:
            backup.write(old)
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _run_scripts(args: Any, protocol: Any, directory: str) -> int:
    """Cline: one executable per event; a file of that name not tripwire's is never touched."""
    command = None
    if args.command == "install":
        if args.serve is not None:
            sys.stderr.write(f"tripwire install: {protocol.NAME} runs command hooks only\n")
            return 1
        command = args.hook_command or default_command(args.harness)
        if args.redis:
            command += f" --redis {shlex.quote(args.redis)}"
    wanted = protocol.scripts(directory, command or "tripwire")
    found: dict[str, str] = {}
    for path in wanted:
        try:
            with open(path, encoding="utf-8", errors="replace") as file:
                found[path] = file.read()
        except FileNotFoundError:
            continue
        except OSError as exc:
            sys.stderr.write(f"tripwire {args.command}: {path}: {exc.strerror or exc}\n")
            return 1
        if not protocol.is_ours(found[path]):
            sys.stderr.write(
                f"tripwire {args.command}: {path} is not tripwire's; nothing was written\n"
            )
            return 1
    if args.command == "install":
        todo = {p: t for p, t in wanted.items() if found.get(p) != t}
    else:
        todo = {p: "" for p in found}
    if not todo:
        sys.stdout.write(f"tripwire: nothing to change in {directory}\n")
        return 0
    for path, text in todo.items():
        if args.dry_run:
            sys.stdout.write(f"# {path} ({'removed' if not text else 'written'}; dry run)\n{text}")
        elif text:
            _write_bytes(path, text.encode("utf-8"), None, 0o755)
        else:
            os.unlink(path)
    verb = "installed in" if args.command == "install" else "removed from"
    if not args.dry_run:
        sys.stdout.write(f"tripwire: hooks {verb} {directory}\n")
    return 0


def run(args: Any) -> int:
    protocol = harness(args.harness)
    if args.scope is None:
        args.scope = getattr(protocol, "DEFAULT_SCOPE", "user")
    try:
        path = protocol.settings_file(args.scope, os.path.abspath(args.project))
    except ValueError as exc:
        sys.stderr.write(f"tripwire {args.command}: {exc}\n")
        return 1
    form = getattr(protocol, "SETTINGS_FORMAT", "json")
    if form == "toml":
        return _run_toml(args, path)
    if form == "scripts":
        return _run_scripts(args, protocol, path)
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
