"""Tool policies: declared with ``Guard(tools=...)``, or inferred from what the harness
already has (the tool's name, its definition's MCP annotations). One source for both
backends: the native guard calls ``check_tools`` and ``infer_policy``.

A policy says what a call may do to the world, which is what tells a loop from progress:

- ``read``: changes nothing; its repeats with nothing between are refused unseen. Declared
  reads may also be served from the run's result cache (``Guard.keep``).
- ``volatile``: a read whose answer moves on its own (builds, queues, live metrics); never
  cached.
- ``poll``: a volatile read meant to be repeated while waiting, up to ``max_polls`` a run.
- ``write``: changes the world: a repeat of another call after it is a new question.
- ``shell``: runs a command (or a code cell) that may read or change anything, and whose
  output, whatever its exit status, is its answer: ``grep`` exits 1 to say "no match",
  ``diff`` to say "differs", a test run to say "failed". Its results are never failures
  and never "empty" (a silent ``sed -i`` succeeded); the same output of the same command is
  what repeats. Otherwise it is judged as a tool with no policy.
- no policy: a tool of unknown kind. After one, a repeat is run and judged by its result
  rather than refused unseen.

Inference never says ``poll`` (that would change verdicts without results) and never makes
a tool cacheable (whether a read's answer outlives a run is for its author to say).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from tripwire._keys import DEFAULT_VOLATILE_KEYS

Policy = Literal["read", "write", "volatile", "poll", "shell"]
Whitespace = Literal["collapse", "keep"]
Source = Literal["declared", "definition", "name"]

POLICIES: Final = ("read", "write", "volatile", "poll", "shell")
# How many times a run may repeat one call to a "poll" tool, unless its policy says.
DEFAULT_MAX_POLLS: Final = 20


class ToolPolicy:
    """A tool's policy: its kind; for polls the most times one call may repeat in a run;
    what counts as an empty result (nothing at all, with ``empty_answers``: empty results
    are answers for this tool; or the built-in empties plus the digests of listed values);
    whether its string arguments keep their whitespace in the key (code, patches); which
    fields of its results change between identical calls (a fetch time, a request id), so
    results are compared without them; and where it came from."""

    __slots__ = (
        "empty_answers",
        "empty_digests",
        "kind",
        "max_polls",
        "result_volatile",
        "source",
        "volatile_result_keys",
        "whitespace",
    )

    def __init__(
        self,
        kind: Policy | None,
        max_polls: int = DEFAULT_MAX_POLLS,
        empty_digests: frozenset[str] = frozenset(),
        empty_answers: bool = False,
        whitespace: Whitespace = "collapse",
        source: Source = "declared",
    ) -> None:
        self.kind = kind
        self.max_polls = max_polls
        self.empty_digests = empty_digests
        self.empty_answers = empty_answers
        self.whitespace = whitespace
        self.source = source
        # The declared names, and what results are keyed without (the default volatile
        # keys and these; None: the default alone, the common case).
        self.volatile_result_keys: frozenset[str] = frozenset()
        self.result_volatile: frozenset[str] | None = None

    def ignore_in_results(self, keys: frozenset[str]) -> None:
        """Results of this tool are compared without these dict keys, at any depth."""
        self.volatile_result_keys = keys
        self.result_volatile = DEFAULT_VOLATILE_KEYS | keys if keys else None


def check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


_SETTINGS: Final = ("policy", "max_polls", "empty", "whitespace", "volatile_result_keys")


def _check_tool_policy(tool: str, spec: object) -> tuple[ToolPolicy, object]:
    """The policy, and its form for ``repr``."""
    if not isinstance(spec, Mapping):
        return ToolPolicy(_check_policy_name(tool, spec)), spec
    unknown = sorted(repr(k) for k in spec if k not in _SETTINGS)
    if unknown:
        raise ValueError(
            f"unknown setting {', '.join(unknown)} in the policy for tool {tool!r}: "
            "expected 'policy', 'max_polls', 'empty', 'whitespace' or 'volatile_result_keys'"
        )
    kind = _check_policy_name(tool, spec.get("policy"))
    shown: dict[str, object] = {"policy": kind}
    policy = ToolPolicy(kind)
    if "max_polls" in spec:
        if kind != "poll":
            raise ValueError(f"max_polls is for 'poll' tools, not {kind!r} ({tool!r})")
        policy.max_polls = check_int("max_polls", spec["max_polls"], 1)
        shown["max_polls"] = policy.max_polls
    if "volatile_result_keys" in spec:
        # Read before "empty": the empty results' digests are taken without these keys, as
        # every result of the tool is.
        keys = _check_result_keys(tool, spec["volatile_result_keys"])
        policy.ignore_in_results(keys)
        shown["volatile_result_keys"] = sorted(keys)
    if "empty" in spec:
        from tripwire._results import digest, unwrap

        empty = spec["empty"]
        if empty is False:
            policy.empty_answers = True
            shown["empty"] = False
        elif isinstance(empty, (list, tuple)):
            volatile = policy.result_volatile
            digests = (digest("result", unwrap(v)[0], volatile_keys=volatile) for v in empty)
            policy.empty_digests = frozenset(d for d in digests if d is not None)
            shown["empty"] = list(empty)
        else:
            raise TypeError(
                f"empty for tool {tool!r} must be a list of results that count as empty, "
                f"or False, not {type(empty).__name__}"
            )
    if "whitespace" in spec:
        whitespace = spec["whitespace"]
        if whitespace != "keep" and whitespace != "collapse":
            raise ValueError(
                f"whitespace for tool {tool!r} must be 'keep' or 'collapse', not {whitespace!r}"
            )
        policy.whitespace = whitespace
        shown["whitespace"] = whitespace
    return policy, shown


def _check_result_keys(tool: str, keys: object) -> frozenset[str]:
    if not isinstance(keys, (list, tuple)):
        raise TypeError(
            f"volatile_result_keys for tool {tool!r} must be a list of result field names "
            f"to ignore, not {type(keys).__name__}"
        )
    for key in keys:
        if not isinstance(key, str):
            raise TypeError(
                f"volatile_result_keys for tool {tool!r} must hold str field names, "
                f"not {type(key).__name__}"
            )
    return frozenset(keys)


def _check_policy_name(tool: str, policy: object) -> Policy:
    # Spelled out, so that the type checker knows which Literal comes back.
    if policy == "read" or policy == "write" or policy == "volatile" or policy == "poll":
        return policy
    if policy == "shell":
        return policy
    raise ValueError(
        f"unknown policy {policy!r} for tool {tool!r}: expected one of "
        + ", ".join(repr(p) for p in POLICIES)
    )


def check_tools(tools: Mapping[str, object] | None) -> tuple[dict[str, ToolPolicy], str]:
    """The declared policies by tool name, and their ``repr``."""
    if tools is None:
        return {}, "{}"
    if not isinstance(tools, Mapping):
        kind = type(tools).__name__
        raise TypeError(f"tools must be a mapping of tool name to policy, not {kind}")
    checked: dict[str, ToolPolicy] = {}
    shown: dict[str, object] = {}
    for tool, spec in tools.items():
        if not isinstance(tool, str):
            raise TypeError(f"tool names in tools must be str, not {type(tool).__name__}")
        checked[tool], shown[tool] = _check_tool_policy(tool, spec)
    return checked, repr(shown)


# -- inference --------------------------------------------------------------------------------

# The tools of the well-known harnesses (docs/design/field.md), by exact name:
# (policy, whitespace). Shell tools are "shell": a command may read or change anything, and
# its output is its answer whatever its exit status. Editing tools keep the
# whitespace of their arguments, which the tool sees: an edit retried with corrected line
# breaks is a different edit.
_KEEP: Final = "keep"
KNOWN_TOOLS: Final[dict[str, tuple[Policy | None, Whitespace]]] = {
    # Claude Code
    "Read": ("read", "collapse"),
    "Grep": ("read", "collapse"),
    "Glob": ("read", "collapse"),
    "LS": ("read", "collapse"),
    "NotebookRead": ("read", "collapse"),
    "WebFetch": ("read", "collapse"),
    "WebSearch": ("volatile", "collapse"),
    "Edit": ("write", _KEEP),
    "MultiEdit": ("write", _KEEP),
    "Write": ("write", _KEEP),
    "NotebookEdit": ("write", _KEEP),
    # A to-do list, or a thought written down, changes nothing the other tools see
    # (tau-bench's and Anthropic's "think" tool).
    "TodoWrite": ("volatile", "collapse"),
    "think": ("volatile", "collapse"),
    "Bash": ("shell", "collapse"),
    # Polls a background shell: judged by its output, which moves while the shell runs.
    "BashOutput": (None, "collapse"),
    "Task": (None, "collapse"),
    # OpenHands (and SWE-agent's tool of the same name): one tool that views, creates,
    # edits and undoes, by its "command". No policy, so each repeat is judged by its result:
    # a second undo_edit undoes another edit, a view repeated with nothing between is not.
    "str_replace_editor": (None, _KEEP),
    "execute_bash": ("shell", "collapse"),
    "execute_ipython_cell": ("shell", "collapse"),
    # Codex CLI
    "shell": ("shell", "collapse"),
    "local_shell": ("shell", "collapse"),
    "apply_patch": ("write", _KEEP),
    "update_plan": ("volatile", "collapse"),
    # SWE-agent's and mini-swe-agent's shell, Codex's newer exec tools, Cline's and
    # Cursor's terminal tools, Copilot CLI's.
    "bash": ("shell", "collapse"),
    "exec_command": ("shell", "collapse"),
    "unified_exec": ("shell", "collapse"),
    "container.exec": ("shell", "collapse"),
    "execute_command": ("shell", "collapse"),
    "run_terminal_cmd": ("shell", "collapse"),
    "run_terminal_command": ("shell", "collapse"),
    "powershell": ("shell", "collapse"),
    # SWE-agent (scroll_up/scroll_down move the view: no policy, judged by their results)
    "open": ("read", "collapse"),
    "goto": ("read", "collapse"),
    "find_file": ("read", "collapse"),
    "search_file": ("read", "collapse"),
    "search_dir": ("read", "collapse"),
    "edit": ("write", _KEEP),
    "create": ("write", "collapse"),
    "scroll_up": (None, "collapse"),
    "scroll_down": (None, "collapse"),
    # Gemini CLI
    "read_file": ("read", "collapse"),
    "read_many_files": ("read", "collapse"),
    "list_directory": ("read", "collapse"),
    "search_file_content": ("read", "collapse"),
    "glob": ("read", "collapse"),
    "web_fetch": ("read", "collapse"),
    "google_web_search": ("volatile", "collapse"),
    "write_file": ("write", _KEEP),
    "replace": ("write", _KEEP),
    "run_shell_command": ("shell", "collapse"),
    "save_memory": ("write", "collapse"),
    # Gemini CLI 0.61 (its tool declarations: grep_search replaced search_file_content; a
    # topic or a to-do list written down changes nothing the other tools see).
    "grep_search": ("read", "collapse"),
    "update_topic": ("volatile", "collapse"),
    "write_todos": ("volatile", "collapse"),
    # Codex CLI 0.171's exec tools (its hooks name exec_command "Bash"); write_stdin polls a
    # running command, judged by its output, as BashOutput is.
    "write_stdin": (None, "collapse"),
    "view_image": ("read", "collapse"),
    # GitHub Copilot CLI (its tool names: bash and its session tools, view, create, edit).
    "view": ("read", "collapse"),
    "read_bash": (None, "collapse"),
    "report_intent": ("volatile", "collapse"),
    # Cursor (its agent tools, and the names its preToolUse hooks give them).
    "Shell": ("shell", "collapse"),
    "edit_file": ("write", _KEEP),
    "search_replace": ("write", _KEEP),
    "codebase_search": ("read", "collapse"),
    "file_search": ("read", "collapse"),
    "list_dir": ("read", "collapse"),
    "todo_write": ("volatile", "collapse"),
    # Cline
    "write_to_file": ("write", _KEEP),
    "replace_in_file": ("write", _KEEP),
    "search_files": ("read", "collapse"),
    "list_files": ("read", "collapse"),
    "list_code_definition_names": ("read", "collapse"),
    # The providers' own server tools (Anthropic's web_search and web_fetch, OpenAI's hosted
    # web_search): a search's answer moves on its own, as WebSearch's does.
    "web_search": ("volatile", "collapse"),
}

# A tool name's verb (snake_case, camelCase, kebab-case, dotted or namespaced MCP names such
# as "github.create_issue" or "mcp__github__create_issue" use the last part): its first word,
# or its second after a first that is no verb.
_WRITE_VERBS: Final = frozenset(
    [
        "write",
        "edit",
        "create",
        "delete",
        "remove",
        "update",
        "set",
        "apply",
        "add",
        "insert",
        "put",
        "post",
        "send",
        "cancel",
        "modify",
        "move",
        "rename",
        "upload",
        "patch",
        "replace",
        "book",
        "transfer",
        "exchange",
        "return",
    ]
)
_READ_VERBS: Final = frozenset(
    [
        "get",
        "list",
        "read",
        "find",
        "search",
        "fetch",
        "view",
        "show",
        "describe",
        "query",
        "lookup",
        "count",
    ]
)
_WORD: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _verb(name: str) -> str:
    """The word of a tool's name that says what it does: the first, or the second where the
    first is no verb. Many MCP servers name their tools ``<service>_<verb>_<object>``: the
    reference Slack server's ``slack_get_channel_history`` and ``slack_post_message``,
    mcp-server-kubernetes' ``kubectl_get`` and ``kubectl_apply``."""
    last = re.split(r"__|[./:]", name)[-1]
    words = [match.group(0).lower() for match in _WORD.finditer(last)][:2]
    for word in words:
        if word in _WRITE_VERBS or word in _READ_VERBS:
            return word
    return words[0] if words else ""


def _from_definition(definition: Any) -> tuple[str, Policy | None] | None:
    """The name a definition gives its tool, and the policy its annotations say (``None``:
    they say nothing). MCP ``Tool`` objects, and dicts as the SDKs hold tool lists."""
    if not isinstance(definition, Mapping):
        dump = getattr(definition, "model_dump", None)
        if not callable(dump):
            return None
        definition = dump(mode="json", by_alias=True)
        if not isinstance(definition, Mapping):
            return None
    function = definition.get("function")
    if isinstance(function, Mapping):  # OpenAI {"type": "function", "function": {...}}
        definition = function
    name = definition.get("name")
    if not isinstance(name, str):
        return None
    hints = definition.get("annotations")
    if not isinstance(hints, Mapping):
        return name, None
    if hints.get("readOnlyHint") is True:
        # An open-world read (web, live systems) answers differently over time.
        return name, "volatile" if hints.get("openWorldHint") is True else "read"
    if hints.get("destructiveHint") is True or hints.get("readOnlyHint") is False:
        return name, "write"
    return name, None


def check_definitions(definitions: Iterable[Any] | None) -> dict[str, Policy]:
    """The policies tool definitions' annotations say, by tool name."""
    if definitions is None:
        return {}
    if isinstance(definitions, (str, bytes, Mapping)):
        raise TypeError(
            "definitions must be an iterable of tool definitions, "
            f"not a single {type(definitions).__name__}"
        )
    found: dict[str, Policy] = {}
    for definition in definitions:
        described = _from_definition(definition)
        if described is None:
            raise TypeError(
                "each of definitions must be a tool definition with a 'name' "
                f"(an MCP Tool, or a dict as the SDKs hold them), not {type(definition).__name__}"
            )
        name, policy = described
        if policy is not None:
            found[name] = policy
    return found


def infer_policy(name: str, definitions: Mapping[str, Policy]) -> ToolPolicy | None:
    """The policy of an undeclared tool, from its definition's annotations, the well-known
    harnesses' tools, or its name's verb; ``None`` where none of them says. Not cached: each
    backend keeps the one cache of its own (``policy_by_name`` here, ``BY_NAME`` in
    ``rust/py_guard.rs``), and a guard resolves its definitions' tools once, when made."""
    annotated = definitions.get(name)
    if annotated is not None:
        known = KNOWN_TOOLS.get(name)
        whitespace: Whitespace = known[1] if known is not None else "collapse"
        return ToolPolicy(annotated, whitespace=whitespace, source="definition")
    return _named_policy(name)


def annotated_policies(definitions: Mapping[str, Policy]) -> dict[str, ToolPolicy]:
    """The policies of the tools that definitions annotate, by name: what a guard resolves
    once, when it is made (definitions come from the harness, so they are bounded)."""
    policies: dict[str, ToolPolicy] = {}
    for name in definitions:
        policy = infer_policy(name, definitions)
        assert policy is not None  # an annotated tool's policy is its annotation
        policies[name] = policy
    return policies


def _named_policy(name: str) -> ToolPolicy | None:
    """The policy a tool's name says: a function of the name alone."""
    known = KNOWN_TOOLS.get(name)
    if known is not None:
        kind, whitespace = known
    else:
        verb = _verb(name)
        kind = "write" if verb in _WRITE_VERBS else "read" if verb in _READ_VERBS else None
        if kind is None:
            return None
        whitespace = "collapse"
    return ToolPolicy(kind, whitespace=whitespace, source="name")


# How many tool names' inferred policies are remembered (tool names come from the model, so
# the memory is bounded; past it, the least recently used is inferred again when next met).
INFERRED_TOOLS: Final = 1024

# The reference's one cache of inferred policies: what a name says is the same for every
# guard, so it is shared (a replay makes a guard per run, and a store restores one per
# check; each would meet its tools anew). Its policies are never changed after they are made.
policy_by_name: Final = functools.lru_cache(maxsize=INFERRED_TOOLS)(_named_policy)
