"""Everything the native core calls in Python, and nothing else: ``rust/py_reference.rs``
resolves exactly the names in ``__all__``, once, when ``tripwire._core`` is initialised (a
rename here fails the import, not the first call that needs it), and no other Rust file
looks a Python name up (``tests/test_for_native.py`` holds both to it).

The dependency is one-way: this module imports the reference's modules, none of which
imports ``tripwire._core``, so the native module can import this one while it is being
initialised. Why each name lives in Python rather than in Rust:

Keys (``tripwire._keys``): what the native walker hands back, where Python's own behaviour
is the contract.

- ``normalise_at``, ``dumps_normalised``, ``canonical_json``: the corners of the key
  contract (tuples, subclasses, non-``str`` keys, ``Decimal``, sets...): their key is
  whatever ``json.dumps(normalise(x))`` makes of them, so Python computes it. Rare.
- ``DEFAULT_VOLATILE_KEYS``: the default volatile keys, defined once.
- ``volatile_set``, ``check_threads``, ``unpack_pair``: argument checks of the key
  functions (``volatile_keys=``, ``threads=``, ``call_keys``' pairs), called by the native
  core only once it has found an argument wrong, for the exception and its message.
- ``verbatim_key``, ``verbatim_key_json``: keys of the editing tools' calls, whose strings
  keep their whitespace (the native walker collapses as it writes); such a call's time
  goes to the edit it makes.
- ``call_key_json``: JSON text the native parser does not take (volatile keys only Python
  can compare, text of a ``str`` or ``bytes`` subclass). Rare.
- ``decode_json_bytes``: ``bytes`` in UTF-16 or UTF-32, decoded as ``json.loads`` decodes
  them. Rare.
- ``UNPARSABLE``, ``invalid_json``: which errors bad JSON arguments raise, and the key and
  text a call with them gets: the error path, and its message.
- ``JSONDecodeError``, ``get_int_max_str_digits``: the standard library's, so that the
  native parser raises what ``json.loads`` raises, at the integer length limit the process
  has set (it can change at run time).

Guards (``tripwire._checks``, ``_policy``, ``_results``, ``_question``, ``_messages``):
configuration, cold paths and every text.

- ``check_limits``, ``check_tools``, ``check_definitions``: a guard's configuration,
  validated once when it is made, with the messages its errors say.
- ``check_name``, ``check_call_id``, ``check_flag``, ``check_verdict``, ``unpack_call``:
  argument checks. The native core tests the same conditions itself on every call and
  calls these only once an argument is wrong, so that the exception and its message come
  from one place.
- ``infer_policy``: an undeclared tool's policy, from its definition or its name: once per
  tool name (the native core keeps the result), and the policy tables live once.
- ``describe_result``: what a result that is not plain says (envelopes, error texts,
  transient failures, a policy's settings); the plain ones the native core reads itself.
- ``content_value``: the value of a result given as JSON text in a table of calls
  (``tripwire.replay``'s Arrow core), read as the reference reads a tool's text result.
- ``json_loads``: ``json.loads``, for a result the JSONL events' native replay holds as a
  JSON value's text (an object, a list, ``null``) that ``content_value`` must read as the
  value the line's decoder made of it. Cold: the commonest results are read natively.
- ``question_of``: what a call asks, told only while a result in the window came back
  empty or failed.
- ``verdict_message``: a verdict's message, built when it is read.

Snapshots (``tripwire._snapshot``): the configuration's part of the format, cold.

- ``SnapshotError``: the error both backends raise.
- ``unframe``: called by the native core only for a snapshot argument that is not bytes,
  for the exception and its message (the native core reads the frame itself).
- ``config_bytes``, ``read_config``: a guard's configuration as a snapshot writes it, and
  read back; once per configuration (the native core keeps what it built).
- ``json_text``, ``json_value``: cached results to and from JSON text, only where a
  snapshot holds cached results.
"""

from __future__ import annotations

from json import JSONDecodeError
from json import loads as json_loads
from sys import get_int_max_str_digits

from tripwire._checks import check_call_id, check_flag, check_limits, check_verdict, unpack_call
from tripwire._keys import (
    DEFAULT_VOLATILE_KEYS,
    UNPARSABLE,
    call_key_json,
    canonical_json,
    check_name,
    check_threads,
    decode_json_bytes,
    dumps_normalised,
    invalid_json,
    normalise_at,
    unpack_pair,
    verbatim_key,
    verbatim_key_json,
    volatile_set,
)
from tripwire._messages import verdict_message
from tripwire._policy import check_definitions, check_tools, infer_policy
from tripwire._question import question_of
from tripwire._results import content_value, describe_result
from tripwire._snapshot import (
    SnapshotError,
    config_bytes,
    json_text,
    json_value,
    read_config,
    unframe,
)

__all__ = (
    "DEFAULT_VOLATILE_KEYS",
    "UNPARSABLE",
    "JSONDecodeError",
    "SnapshotError",
    "call_key_json",
    "canonical_json",
    "check_call_id",
    "check_definitions",
    "check_flag",
    "check_limits",
    "check_name",
    "check_threads",
    "check_tools",
    "check_verdict",
    "config_bytes",
    "content_value",
    "decode_json_bytes",
    "describe_result",
    "dumps_normalised",
    "get_int_max_str_digits",
    "infer_policy",
    "invalid_json",
    "json_loads",
    "json_text",
    "json_value",
    "normalise_at",
    "question_of",
    "read_config",
    "unframe",
    "unpack_call",
    "unpack_pair",
    "verbatim_key",
    "verbatim_key_json",
    "verdict_message",
    "volatile_set",
)
