"""Run an AsyncQueue from synchronous test code, so one test body covers both
clients: every coroutine method is run on a private event-loop thread."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from conveyor import AsyncQueue


class AsyncFacade:
    def __init__(self, make: Callable[[], AsyncQueue]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.inner: AsyncQueue = self._call(self._make(make))

    @staticmethod
    async def _make(make: Callable[[], AsyncQueue]) -> AsyncQueue:
        return make()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=60)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if inspect.iscoroutinefunction(attr):

            @functools.wraps(attr)
            def run(*args: Any, **kwargs: Any) -> Any:
                return self._call(attr(*args, **kwargs))

            return run
        return attr

    def __enter__(self) -> AsyncFacade:
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self.inner.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
