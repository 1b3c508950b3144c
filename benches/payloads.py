"""The three benchmark payloads (docs/design/speed.md), as ``(name, args)``; deterministic.

- ``seed``: the seed document's ``get_logs`` call (~80 canonical bytes).
- ``1kb``: a ``search_orders`` call: nested filters, ten small order dicts, floats (integral
  and not), ``None`` entries and a volatile key to drop, non-ASCII strings (~1 KB canonical).
- ``100kb``: a ``write_file`` call: ~60 KB of Python-like source (newlines, indentation; the
  key collapses its whitespace) plus ~40 KB of structured records (~100 KB canonical).

Only ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``, so the native core walks
all of it itself and never hands a value back to the Python helpers.

``python benches/payloads.py`` prints their sizes.
"""

from __future__ import annotations

from typing import Any

Payload = tuple[str, dict[str, Any]]

SEED: Payload = ("get_logs", {"service": "checkout", "since": "15m", "level": "error"})

_CITIES = ("Zürich", "São Paulo", "Kraków", "Malmö", "東京", "Reykjavík", "Montréal", "Αθήνα")
_ITEMS = ("café crème", "naïve tea", "jalapeño dip", "crème brûlée", "smörgåsbord", "pâté")


def _orders(count: int, start: int) -> list[dict[str, Any]]:
    orders = []
    for i in range(start, start + count):
        orders.append(
            {
                "id": i,
                "city": _CITIES[i % len(_CITIES)],
                "total": round(12.5 + i * 3.17, 2),
                "paid": i % 3 != 0,
                "coupon": None if i % 2 else f"SPRING{i % 7}",
            }
        )
    return orders


ONE_KB: Payload = (
    "search_orders",
    {
        "query": "  refund   requested\tfor   damaged item  ",
        "filters": {
            "status": ["shipped", "delivered"],
            "total": {"min": 10.0, "max": 250.75},
            "created": {"from": "2024-05-01T00:00:00Z", "to": "2024-05-31T23:59:59Z"},
            "customer": {"country": "CH", "tier": "gold", "vip": True},
        },
        "sort": [{"field": "created", "order": "desc"}, {"field": "total", "order": "asc"}],
        "page": {"size": 10, "cursor": None},
        "request_id": "req-8f14e45f",
        "seen": _orders(10, 1000),
    },
)

_FUNCTION = '''

def handle_{name}_{i}(request, *, timeout={timeout}, retries={retries}):
    """Handle a {name} request for shard {i}; retries transient failures."""
    items = [item for item in request.items if item.quantity > 0]
    if not items:
        return {{"id": request.id, "status": "empty", "shard": {i}}}
    total = sum(item.price * item.quantity for item in items)
    for attempt in range(retries):
        try:
            receipt = gateway.charge(request.customer, round(total, 2), timeout=timeout)
        except TransientError as exc:
            log.warning("charge failed (attempt %d): %s", attempt + 1, exc)
            continue
        else:
            break
    else:
        raise RuntimeError(f"shard {i}: giving up after {{retries}} attempts")
    return {{"id": request.id, "receipt": receipt.id, "total": total, "shard": {i}}}
'''

_NAMES = ("checkout", "refund", "invoice", "shipment", "inventory", "payout")


def _source(target_bytes: int) -> str:
    parts = ['"""Generated handlers for the checkout service."""\n\nimport logging\n']
    size = len(parts[0])
    i = 0
    while size < target_bytes:
        part = _FUNCTION.format(
            name=_NAMES[i % len(_NAMES)], i=i, timeout=5.0 + i % 4, retries=2 + i % 3
        )
        parts.append(part)
        size += len(part)
        i += 1
    return "".join(parts)


def _records(count: int) -> list[dict[str, Any]]:
    return [
        {
            "sku": f"SKU-{i:05d}",
            "name": f"{_ITEMS[i % len(_ITEMS)]} #{i}",
            "warehouse": _CITIES[i % len(_CITIES)],
            "price": round(0.99 + i * 0.37, 2),
            "weight_kg": float(1 + i % 5),
            "stock": (i * 37) % 500,
            "tags": ["fragile", "food"] if i % 2 else ["bulk"],
            "discontinued": i % 11 == 0,
        }
        for i in range(count)
    ]


HUNDRED_KB: Payload = (
    "write_file",
    {
        "path": "services/checkout/handlers_generated.py",
        "content": _source(60_000),
        "mode": "overwrite",
        "encoding": "utf-8",
        "metadata": {"author": "agent", "reviewed": False, "records": _records(260)},
    },
)

PAYLOADS: dict[str, Payload] = {"seed": SEED, "1kb": ONE_KB, "100kb": HUNDRED_KB}


def json_batch(
    count: int,
    *,
    sort_keys: bool = False,
    compact: bool | None = None,
    query: str = "timeout  near line {i}",
    nulls: bool = True,
) -> list[tuple[str, str]]:
    """``count`` distinct seed-shaped ``get_logs`` calls as JSON text (~116 bytes each), for
    ``call_keys``: keys in schema order (not sorted), half the texts compact and half with
    ``", "``/``": "`` separators, a third written with ``ensure_ascii``, one service in seven
    non-ASCII, a double space in ``query``, ``limit`` null three times in four.

    The keywords change one of these at a time (``benches/batch_anatomy.py``): ``sort_keys``,
    ``compact`` (every text, one way), the ``query`` template, ``nulls=False`` (``limit``
    always 100).
    """
    import json

    services = ("checkout", "payments", "search", "auth", "inventory", "shipping", "café")
    levels = ("error", "warn", "info")
    calls = []
    for i in range(count):
        args = {
            "service": services[i % len(services)],
            "since": f"{i % 60}m",
            "level": levels[i % len(levels)],
            "query": query.format(i=i),
            "limit": None if nulls and i % 4 else 100,
            "page": i,
        }
        tight = compact if compact is not None else i % 2 == 1
        separators = (",", ":") if tight else (", ", ": ")
        text = json.dumps(args, separators=separators, ensure_ascii=i % 3 > 0, sort_keys=sort_keys)
        calls.append(("get_logs", text))
    return calls


def sizes() -> dict[str, tuple[int, int]]:
    """Per payload: (canonical bytes, raw ``json.dumps`` bytes before normalising)."""
    import json

    from tripwire.reference import canonical_json

    return {
        label: (len(canonical_json(name, args)), len(json.dumps({"tool": name, "args": args})))
        for label, (name, args) in PAYLOADS.items()
    }


if __name__ == "__main__":
    for label, (canonical, raw) in sizes().items():
        print(f"{label:>6}: {canonical:>7,} canonical bytes ({raw:,} bytes of raw JSON)")
