"""Queue and AsyncQueue are hand-kept twins over one core: this keeps them in step."""

from __future__ import annotations

import inspect

from conveyor import AsyncQueue, Queue

SYNC_ONLY = {"__enter__", "__exit__"}
ASYNC_ONLY = {"__aenter__", "__aexit__"}


def _public(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") or name in SYNC_ONLY | ASYNC_ONLY | {"__init__"}
    }


def test_both_clients_have_the_same_methods() -> None:
    sync, aio = _public(Queue), _public(AsyncQueue)
    assert set(sync) - SYNC_ONLY == set(aio) - ASYNC_ONLY
    assert len(sync) > 20  # the comparison saw the real API


def test_the_same_signatures_and_async_where_io_happens() -> None:
    sync, aio = _public(Queue), _public(AsyncQueue)
    for name in set(sync) - SYNC_ONLY:
        s, a = sync[name], aio[name]
        if isinstance(s, property):
            assert isinstance(a, property), name
            continue
        s_sig, a_sig = inspect.signature(s), inspect.signature(a)  # type: ignore[arg-type]
        assert list(s_sig.parameters) == list(a_sig.parameters), name
        for p, q in zip(s_sig.parameters.values(), a_sig.parameters.values(), strict=True):
            assert (p.kind, p.default) == (q.kind, q.default), f"{name}({p.name})"
        if name in ("__init__", "failure_lane", "peer"):  # build a client, no I/O
            continue
        assert inspect.iscoroutinefunction(a) or inspect.isasyncgenfunction(a), name
        assert not inspect.iscoroutinefunction(s), name
