"""Redis access the Spark formats need and the client API does not offer yet.

DESIGN.md §1 says integrations use the public client API, never raw keys. These are the
exceptions, each a thin, documented function over `QueueKeys` names, kept in this one module
so that each can move into `conveyor.client` (or become a Lua transition) without touching
the data sources. docs/spark.md lists them as requests to the client.

Every key used here carries the queue's hash tag, so all of it is Redis Cluster-safe.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis import exceptions as rx

from conveyor.job import JobState
from conveyor.protocol import ops
from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.ops import text
from conveyor.protocol.record import DATA_PIECE_NAMES, FIRST_PIECE_MIN, record_data

if TYPE_CHECKING:
    from conveyor.client.transport import SyncRunner

    from .encode import Chunk

__all__ = [
    "STATES",
    "consumer_positions",
    "existing_ids",
    "fetch_jobs",
    "fetch_pages",
    "forget_finished",
    "index_key",
    "raw_streams",
    "register_consumer",
    "sort_records",
    "trim_events",
]

# State -> (index key, record key pattern). `blocked` rows are the blocked twins of
# running singletons (same id as the active job); `waiting_children` rows are flow parents
# waiting for their children (docs/protocol.md §14).
STATES: tuple[str, ...] = (
    "waiting", "delayed", "active", "completed", "failed", "blocked", "waiting_children",
)  # fmt: skip
_LIVE_INDEXES = ("ready", "scheduled", "active", "completed", "failed", "waiting_children")


def index_key(keys: QueueKeys, state: str) -> str:
    """The index of `state` (waiting: the ungrouped jobs; see `state_indexes`)."""
    return {
        JobState.WAITING: keys.ready,
        JobState.DELAYED: keys.scheduled,
        JobState.ACTIVE: keys.active,
        JobState.COMPLETED: keys.completed,
        JobState.FAILED: keys.failed,
        JobState.BLOCKED: keys.blocked,
        JobState.WAITING_CHILDREN: keys.waiting_children,
    }[JobState(state)]


def group_names(client: redis.Redis, keys: QueueKeys) -> list[str]:
    """Groups that may hold waiting jobs (runnable or held back), as `Queue.counts` finds
    them. Requested from the client: `Queue.groups()`."""
    names = [*client.zrange(keys.groups, 0, -1), *client.zrange(keys.gwait, 0, -1)]
    return sorted({text(n) for n in names})


def state_indexes(client: redis.Redis, keys: QueueKeys, state: str) -> list[str]:
    """Every index listing jobs in `state`: waiting jobs of each group have their own."""
    if state != JobState.WAITING:
        return [index_key(keys, state)]
    return [keys.ready, *(keys.group_ready(g) for g in group_names(client, keys))]


def record_pattern(keys: QueueKeys, state: str) -> str:
    """The `SORT ... GET` pattern of the records indexed under `state`."""
    return keys.blocked_job("*") if state == JobState.BLOCKED else keys.job("*")


def raw_streams(client: redis.Redis) -> redis.Redis:
    """Make XRANGE / XREVRANGE return raw replies: [[id, [f, v, ...]], ...]. Decoding
    them into columns directly is about twice as fast as redis-py's dict per entry."""
    for command in ("XRANGE", "XREVRANGE"):
        client.set_response_callback(command, lambda reply, **_: reply)
    return client


# --- enqueue: what already exists -------------------------------------------------------


def existing_ids(
    client: redis.Redis, keys: QueueKeys, ids: Sequence[str], groups: Iterable[str] = ()
) -> set[str]:
    """The ids among `ids` that are a job of the queue in any state (waiting, delayed,
    active, or finished and still retained), read atomically (MULTI of ZMSCORE, Redis 6.2+).
    `groups` are the groups of these jobs: their waiting jobs have their own indexes.

    Only rows that `enqueue_skip` cannot take (a `delay`, `run_at` or `group` value) are
    looked up here; the others skip existing ids inside the script (docs/spark.md,
    "Requests to the core", 2).
    """
    if not ids:
        return set()
    indexes = [getattr(keys, name) for name in _LIVE_INDEXES]
    indexes += [keys.group_ready(group) for group in sorted(set(groups)) if group]
    pipe = client.pipeline(transaction=True)
    for index in indexes:
        pipe.execute_command("ZMSCORE", index, *ids)  # type: ignore[no-untyped-call]
    found: set[str] = set()
    for scores in pipe.execute():
        found.update(job_id for job_id, score in zip(ids, scores, strict=True) if score is not None)
    return found


def encode_chunk(chunk: Chunk) -> bytes:
    """A chunk of encoded jobs as one Arrow IPC stream, for staging (atomic writes)."""
    import pyarrow as pa

    batch = pa.RecordBatch.from_arrays(
        [chunk.ids, chunk.segments],
        names=["id", "segment"],
        metadata={"groups": json.dumps(chunk.groups), "script": chunk.script},
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as stream:
        stream.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def decode_chunk(blob: bytes) -> Chunk:
    import pyarrow as pa

    from .encode import Chunk

    batch = pa.ipc.open_stream(pa.py_buffer(blob)).read_next_batch()
    metadata = batch.schema.metadata or {}
    groups = json.loads(metadata.get(b"groups", b"[]"))
    script = metadata.get(b"script", b"enqueue").decode()
    return Chunk(batch.column("id"), batch.column("segment"), tuple(groups), script)


# --- atomic writes: staging ---------------------------------------------------------------


def staging_registry(keys: QueueKeys, write_id: str) -> str:
    return f"{keys.base}staging:{write_id}"


def staging_key(keys: QueueKeys, write_id: str, partition: int, attempt: int) -> str:
    return f"{keys.base}staging:{write_id}:{partition}:{attempt}"


def staging_aborted(keys: QueueKeys, write_id: str) -> str:
    return f"{keys.base}staging:{write_id}:aborted"


def apply_pending_key(keys: QueueKeys, reader: str) -> str:
    """Where the tasks of one `apply` write list the ids of the jobs that will still end."""
    return f"{keys.base}spark:apply:{reader}:pending"


def sort_records(
    client: redis.Redis, keys: QueueKeys, ids: Sequence[str], fields: Sequence[str]
) -> list[Any]:
    """`fields` of the records of `ids` (None where absent), flat, `len(fields)` per id in
    order: the ids are put in a list of their own for a moment and read with one
    `SORT list BY nosort GET ..` (the reader's one server call per page, instead of a
    pipelined HMGET per id), in one pipeline with the list's creation and deletion. Where
    `SORT ... GET` is refused (see `fetch_jobs`), pipelined HMGETs."""
    if not ids:
        return []
    scratch = f"{keys.base}spark:ids:{uuid.uuid4().hex}"
    gets = [part for field in fields for part in ("GET", f"{keys.job('*')}->{field}")]
    pipe = client.pipeline(transaction=False)
    pipe.rpush(scratch, *ids)
    pipe.execute_command("SORT", scratch, "BY", "nosort", *gets)  # type: ignore[no-untyped-call]
    pipe.delete(scratch)
    replies = pipe.execute(raise_on_error=False)
    errors = [reply for reply in replies if isinstance(reply, Exception)]
    if not errors and len(replies[1]) == len(ids) * len(fields):
        return list(replies[1])
    for error in errors:
        if not isinstance(error, rx.ResponseError | rx.NoPermissionError):
            raise error
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(keys.job(job_id), list(fields))
    return [value for values in pipe.execute() for value in values]


class WriteAbortedError(RuntimeError):
    """The driver aborted this write: a task still running must stage nothing more."""


def stage(
    client: redis.Redis,
    keys: QueueKeys,
    write_id: str,
    key: str,
    blobs: Sequence[bytes],
    ttl_s: int,
) -> None:
    """Append chunks to a task attempt's staging list, registered for commit and abort.
    Both expire after `ttl_s`, so a driver that died mid-write leaves nothing for ever.

    A task can outlive its job's abort (Spark kills tasks asynchronously). The abort first
    sets a tombstone; staging WATCHes it, so a chunk is either staged and registered before
    the abort (which then deletes it) or not staged at all."""
    registry = staging_registry(keys, write_id)
    tombstone = staging_aborted(keys, write_id)
    with client.pipeline(transaction=True) as tx:
        try:
            tx.watch(tombstone)  # type: ignore[no-untyped-call]
            if tx.exists(tombstone):
                raise WriteAbortedError(f"write {write_id} was aborted")
            tx.multi()
            tx.sadd(registry, key)
            tx.expire(registry, ttl_s)
            if blobs:
                tx.rpush(key, *blobs)
            tx.expire(key, ttl_s)
            tx.execute()
        except rx.WatchError:
            raise WriteAbortedError(f"write {write_id} was aborted") from None


def staged_chunks(client: redis.Redis, key: str, page: int = 16) -> Iterable[Chunk]:
    start = 0
    while True:
        blobs: list[bytes] = client.lrange(key, start, start + page - 1)  # type: ignore[assignment]
        for blob in blobs:
            yield decode_chunk(blob)
        if len(blobs) < page:
            return
        start += page


def drop_staging(
    client: redis.Redis, keys: QueueKeys, write_id: str, *, aborted: bool = False
) -> int:
    """Delete every staging list of a write (failed attempts too) and the registry; with
    `aborted`, first leave a tombstone (for a day) so that no late task stages more."""
    registry = staging_registry(keys, write_id)
    if aborted:
        client.set(staging_aborted(keys, write_id), 1, ex=86_400)
    members = [text(m) for m in client.smembers(registry)]
    for i in range(0, len(members), 500):
        client.delete(*members[i : i + 500])
    client.delete(registry)
    return len(members)


# --- reading jobs ---------------------------------------------------------------------------


def rank_of_score(client: redis.Redis, key: str, score: float) -> int:
    """How many entries of `key` score below `score`."""
    return int(client.zcount(key, "-inf", f"({score!r}"))


def fetch_jobs(
    client: redis.Redis,
    keys: QueueKeys,
    key: str,
    state: str,
    fields: Sequence[str],
    start: int,
    count: int,
) -> list[Any]:
    """Records at ranks [start, start + count) of index `key` (of jobs in `state`), flat:
    per job its id,
    then `fields` (None where absent). One `SORT key BY nosort LIMIT .. GET ..` per page:
    about 3x the speed of pipelined HMGETs, all work in one server call. Where SORT's GET
    patterns are refused (Redis Cluster before 8, ACLs without @dangerous), falls back to
    ZRANGE + pipelined HMGET with the same result.

    `data` is the whole data: a record stores data over 64 bytes in pieces (`data`,
    `data2`, ...; docs/protocol.md §4.1) whose first is at least 61 bytes long, so only the
    rows whose `data` is that long are looked at again, all their pieces in one more
    pipelined round trip."""
    pattern = record_pattern(keys, state)
    flat = _fetch_rows(client, key, pattern, fields, start, count)
    if "data" in fields:
        _join_pieces(client, pattern, flat, len(fields) + 1, list(fields).index("data") + 1)
    return flat


def fetch_pages(
    client: redis.Redis,
    keys: QueueKeys,
    key: str,
    state: str,
    fields: Sequence[str],
    ranks: tuple[int, int],
    page: int,
) -> Iterator[list[Any]]:
    """`fetch_jobs` of each page of `page` ranks in [start, stop), in order, with the next
    page's `SORT` sent before a page is handed on: Redis reads one page while the caller
    builds the batch of the one before (one call in flight on a connection of its own).
    Any error on that connection (SORT refused, a cluster's redirect, a lost connection)
    drops it and reads the rest page by page with `fetch_jobs`, which retries as usual."""
    start, stop = ranks
    pattern = record_pattern(keys, state)
    gets = _gets(pattern, fields)
    data_at = list(fields).index("data") + 1 if "data" in fields else None
    connection: Any = client.connection_pool.get_connection()
    pending = False  # a reply is due on `connection`
    at = start
    try:

        def send(offset: int) -> bool:
            count = min(page, stop - offset)
            try:
                connection.send_command("SORT", key, "BY", "nosort", "LIMIT", offset, count, *gets)
            except rx.RedisError:
                return False
            return True

        pending = at < stop and send(at)
        while pending:
            try:
                flat = list(connection.read_response())
            except rx.RedisError:
                break
            pending = at + page < stop and send(at + page)
            if data_at is not None:
                _join_pieces(client, pattern, flat, len(fields) + 1, data_at)
            yield flat
            at += page
    finally:
        if pending or at < stop:  # stopped early or failed: a reply may be on its way
            connection.disconnect()
        client.connection_pool.release(connection)
    for offset in range(at, stop, page):
        yield fetch_jobs(client, keys, key, state, fields, offset, min(page, stop - offset))


def _gets(pattern: str, fields: Sequence[str]) -> list[str]:
    gets: list[str] = ["GET", "#"]
    for field in fields:
        gets += ["GET", f"{pattern}->{field}"]
    return gets


def _fetch_rows(
    client: redis.Redis, key: str, pattern: str, fields: Sequence[str], start: int, count: int
) -> list[Any]:
    gets = _gets(pattern, fields)
    try:
        return list(
            client.execute_command("SORT", key, "BY", "nosort", "LIMIT", start, count, *gets)  # type: ignore[no-untyped-call]
        )
    except (rx.ResponseError, rx.NoPermissionError):
        pass
    ids = client.zrange(key, start, start + count - 1)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(pattern.replace("*", text(job_id), 1), list(fields))
    flat: list[Any] = []
    for job_id, values in zip(ids, pipe.execute(), strict=True):
        flat.append(job_id)
        flat.extend(values)
    return flat


def _join_pieces(
    client: redis.Redis, pattern: str, flat: list[Any], width: int, data_at: int
) -> None:
    """Makes the data at `data_at` of every `width`-entry row of `flat` whole. The pieces
    of a row that may have more are all read again together, so that a record rewritten
    since the first read still gives the data of one version. The rows are found in
    Arrow (the lengths of a page's data at once: a Python test per row was a fifth of
    the reader's own time)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.binary_length(pa.array(flat[data_at::width], pa.binary()))
    long = pc.fill_null(pc.greater_equal(lengths, FIRST_PIECE_MIN), False)
    candidates = [k * width for k in pc.indices_nonzero(long).to_pylist()]
    if not candidates:
        return
    pipe = client.pipeline(transaction=False)
    for row in candidates:
        pipe.hmget(pattern.replace("*", text(flat[row]), 1), list(DATA_PIECE_NAMES))
    for row, pieces in zip(candidates, pipe.execute(), strict=True):
        flat[row + data_at] = record_data(dict(zip(DATA_PIECE_NAMES, pieces, strict=True)))


# --- archiving: removing finished jobs -------------------------------------------------------


def forget_finished(
    runner: SyncRunner, keys: QueueKeys, items: Sequence[tuple[str, int]], *, batch: int
) -> tuple[int, int]:
    """Delete finished jobs that were archived: (id, finished_at ms) pairs, `batch` per
    `forget` call (docs/protocol.md §6.20), the calls pipelined. A job is removed only if its
    record is still completed or failed with that very finished_at; a job re-enqueued since
    (a new run of the same id) is kept. Returns (removed, kept)."""
    calls = [ops.forget(keys, items[i : i + batch]) for i in range(0, len(items), batch)]
    removed = kept = 0
    for reply in runner.run_many(calls):
        if isinstance(reply, Exception):
            raise reply
        r, k = ops.decode_forget(reply)
        removed, kept = removed + r, kept + k
    return removed, kept


# --- events: registered consumers and trimming --------------------------------------------


def consumers_key(keys: QueueKeys) -> str:
    return f"{keys.base}consumers"


def register_consumer(client: redis.Redis, keys: QueueKeys, name: str, stream_id: str) -> None:
    """Record that consumer `name` has processed every event up to `stream_id`."""
    client.hset(consumers_key(keys), name, stream_id)


def unregister_consumer(client: redis.Redis, keys: QueueKeys, name: str) -> None:
    client.hdel(consumers_key(keys), name)


def consumer_positions(client: redis.Redis, keys: QueueKeys) -> dict[str, str]:
    raw = client.hgetall(consumers_key(keys))
    return {text(k): text(v) for k, v in raw.items()}


def stream_id_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stream_id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def trim_events(client: redis.Redis, keys: QueueKeys, *, keep_ms: int | None = None) -> int:
    """Trim the events stream without dropping what a registered consumer has not read:
    everything up to the slowest consumer's position goes (or only what is older than
    `keep_ms` before now, when that is less). With no registered consumer, only `keep_ms`
    applies; with neither, nothing is trimmed. Returns the number of entries removed.

    The enqueue/claim/... scripts also trim with `MAXLEN ~ events_maxlen` as they emit;
    docs/spark.md describes the Lua change that makes them respect consumers too.
    """
    floors: list[tuple[int, int]] = []
    positions = consumer_positions(client, keys)
    if positions:
        floors.append(min(stream_id_key(p) for p in positions.values()))
    if keep_ms is not None:
        seconds, micros = client.time()
        floors.append((int(seconds) * 1000 + int(micros) // 1000 - keep_ms, 0))
    if not floors:
        return 0
    ms, seq = min(floors)
    # MINID keeps ids >= the floor; the consumer's own last id has been read, so + 1.
    return int(client.xtrim(keys.events, minid=f"{ms}-{seq + 1}"))
