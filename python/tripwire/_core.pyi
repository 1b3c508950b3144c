"""Type stubs for the native core; the reference in ``tripwire._guard`` / ``tripwire._keys``
has the same API and documents the behaviour."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, Literal, final

from typing_extensions import deprecated

MAX_DEPTH: Final[int]
CALL_ID_MEMORY: Final[int]
CACHE_ENTRIES: Final[int]

def call_key(name: str, args: Any, /, *, volatile_keys: Iterable[Any] | None = None) -> str: ...
def canonical_json(
    name: str, args: Any, /, *, volatile_keys: Iterable[Any] | None = None
) -> bytes: ...
def call_key_json(
    name: str, text: str | bytes | bytearray, /, *, volatile_keys: Iterable[Any] | None = None
) -> str: ...
def call_keys(
    calls: Iterable[Any],
    /,
    *,
    volatile_keys: Iterable[Any] | None = None,
    threads: int | None = None,
) -> list[str]: ...

@final
class Verdict:
    @property
    def action(self) -> Literal["allow", "nudge", "stop"]: ...
    @property
    def reason(self) -> Literal["loop_detected", "budget_exhausted", "no_progress"] | None: ...
    @property
    def tool(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def repeats(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def cached(self) -> Any: ...
    @property
    def call_id(self) -> str | None: ...
    @property
    def duplicate_of(self) -> int | None: ...
    @property
    def invalid_arguments(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __reduce__(self) -> tuple[Any, tuple[bytes, int, str | None, Any]]: ...
    @staticmethod
    def _from_reduced(data: bytes, window: int, budget: str | None, cached: Any, /) -> Verdict: ...

@final
class Guard:
    # None means the default: window=12, nudge_at=2, stop_at=3.
    def __new__(
        cls,
        *,
        window: int | None = None,
        nudge_at: int | None = None,
        stop_at: int | None = None,
        volatile_keys: Iterable[Any] | None = None,
        max_steps: int | None = None,
        tools: Mapping[str, Literal["read", "write", "volatile", "poll"] | Mapping[str, Any]]
        | None = None,
        infer: bool | None = None,
        definitions: Iterable[Any] | None = None,
    ) -> Guard: ...
    def check(self, name: str, args: Any, /, *, call_id: str | None = None) -> Verdict: ...
    def check_json(
        self, name: str, text: str | bytes | bytearray, /, *, call_id: str | None = None
    ) -> Verdict: ...
    def check_turn(self, calls: Iterable[Sequence[Any]], /) -> list[Verdict]: ...
    def keep(self, verdict: Verdict, result: Any, /) -> None: ...
    @deprecated("Guard.record() is deprecated: use Guard.keep(), which does the same")
    def record(self, verdict: Verdict, result: Any, /) -> None: ...
    def observe(
        self,
        verdict: Verdict,
        result: Any,
        /,
        *,
        error: Any = None,
        transient: bool | None = None,
    ) -> None: ...
    def user_message(self) -> None: ...
    def policy_of(
        self, name: str, /
    ) -> tuple[Literal["read", "write", "volatile", "poll"] | None, str | None]: ...
    def reset(self) -> None: ...
    def snapshot(self, *, state_only: bool | None = None) -> bytes: ...
    @staticmethod
    def from_snapshot(data: bytes | bytearray | memoryview, /) -> Guard: ...
    def load(self, data: bytes | bytearray | memoryview, /) -> None: ...
    def __reduce__(self) -> tuple[Any, tuple[bytes]]: ...
    @property
    def steps(self) -> int: ...
    @property
    def stopped(self) -> bool: ...
    def keys(self) -> list[str]: ...
    def __len__(self) -> int: ...

@final
class TableReplay:
    """A table of calls replayed natively (``tripwire.replay.arrow_core``)."""

    def __new__(
        cls,
        guard: Guard,
        /,
        *,
        observe: bool,
        prices: Callable[[str | None], tuple[float, float, float, float]],
        plan: Mapping[str, str],
        sink: Callable[[list[tuple[Any, ...]], list[tuple[int, str]]], object],
        cell_limit: int,
        too_long: Mapping[str, str],
        max_pending: int = ...,
    ) -> TableReplay: ...
    def feed_stream(self, source: Any, /) -> int: ...
    def feed_batch(self, batch: Any, /) -> int: ...
    def finish(self) -> None: ...
    @property
    def row(self) -> int: ...
    @row.setter
    def row(self, row: int) -> None: ...
    @property
    def turns(self) -> int: ...

@final
class EventsReplay:
    """An events JSONL file replayed natively (``tripwire.replay.events_core``)."""

    def __new__(
        cls,
        guard: Guard,
        /,
        *,
        observe: bool,
        prices: Callable[[str | None], tuple[float, float, float, float]],
        sink: Callable[
            [list[tuple[tuple[Any, ...], int, int]], list[tuple[int, str]], list[str], int],
            object,
        ],
        default_run: str,
        max_open: int,
        max_evicted: int,
        line_limit: int,
        max_pending: int = ...,
        usage: Callable[[bytes], tuple[int, int, int, int] | str | None] | None = None,
    ) -> EventsReplay: ...
    def replay(self, path: str, /) -> str | None: ...
    @property
    def lines(self) -> int: ...
    @property
    def turns(self) -> int: ...
    @property
    def split_runs(self) -> int: ...
    @property
    def orphan_results(self) -> int: ...
    @property
    def position(self) -> int: ...
