"""Issue 15, defect 4: a plain connection reset while reconnecting to a Redis
that answered before is reported as what it is, not as a TLS port."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from chaos.proxy import FaultProxy

from conveyor import AsyncQueue, Queue
from conveyor.errors import ConnectionLostError


@pytest.fixture
def proxy(redis_client: redis.Redis) -> Iterator[FaultProxy]:
    port = redis_client.connection_pool.connection_kwargs["port"]
    with FaultProxy(port, seed=4) as fault_proxy:
        yield fault_proxy


def _cut_every_reply(proxy: FaultProxy) -> None:
    """Reset every open connection, and from now on drop every reply with a
    reset: the reconnect's handshake is then reset by the network. (The
    first send's connection dies mid-command, so the error may well be an
    UncertainWriteError; what matters here is what it says about the reset.)"""
    proxy.lose_replies(1.0)
    proxy.reset()


@pytest.mark.parametrize("lean_wire", ["1", "0"])
def test_a_reset_while_reconnecting_is_not_reported_as_a_tls_port(
    proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, lean_wire: str, queue_name: str
) -> None:
    monkeypatch.setenv("CONVEYOR_WIRE", lean_wire)
    queue = Queue(queue_name, url=proxy.url)
    queue.enqueue("t", 1)  # connected: this address is a Redis
    _cut_every_reply(proxy)
    with pytest.raises(ConnectionLostError) as caught:
        queue.enqueue("t", 2)
    queue.close()
    message = str(caught.value)
    assert "TLS" not in message, message
    assert "reset" in message and "answered before" in message, message


@pytest.mark.parametrize("lean_wire", ["1", "0"])
def test_a_reset_while_reconnecting_async(
    proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, lean_wire: str, queue_name: str
) -> None:
    monkeypatch.setenv("CONVEYOR_WIRE", lean_wire)

    async def main() -> str:
        async with AsyncQueue(queue_name, url=proxy.url) as queue:
            await queue.enqueue("t", 1)
            _cut_every_reply(proxy)
            with pytest.raises(ConnectionLostError) as caught:
                await queue.enqueue("t", 2)
            return str(caught.value)

    message = asyncio.run(main())
    assert "TLS" not in message, message
    assert "reset" in message and "answered before" in message, message
