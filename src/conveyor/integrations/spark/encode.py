"""DataFrame rows (Arrow batches) to enqueue script arguments, on the Spark executors.

Validation is Conveyor's own: each distinct combination of task and options goes through
`QueueCore.spec` (the function `Queue.enqueue` uses) once, giving a template job. A job's
script arguments are the template's, RESP-encoded once, with only its id and data swapped
in, so each batch is encoded column-wise in Arrow without a Python object per row: ids are
checked against `ID_PATTERN` (rows that miss it go through `check_job_id` for its error),
payload columns become JSON objects (`payload.py`) and sizes are checked against the
queue's payload limit. The bytes are exactly what `hiredis.pack_command` makes of
`ops.enqueue`'s arguments for the same jobs (tests/spark check it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import hiredis

from conveyor import serializers
from conveyor.client.core import QueueCore
from conveyor.errors import PayloadTooLargeError, ValidationError
from conveyor.options import check_job_id
from conveyor.protocol.keys import ID_PATTERN

from .payload import json_objects
from .schema import WRITE_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["OPTION_COLUMNS", "Chunk", "RowEncoder", "check_columns", "resp"]

# Reserved columns that become enqueue options, in a fixed order (the template key).
OPTION_COLUMNS = (
    "priority",
    "delay",
    "run_at",
    "group",
    "max_failures",
    "max_stalls",
    "timeout",
    "result_ttl",
    "min_backoff",
    "max_backoff",
)
_TEMPLATE_CACHE_MAX = 4096
# Stand-ins for the per-row values in a template's arguments (never valid ids or JSON).
_ID_SLOT, _DATA_SLOT = "\x00id\x00", "\x00data\x00"


def check_columns(names: Sequence[str], *, default_task: str | None) -> None:
    """Fail on the driver, before any task runs, when the columns cannot make jobs."""
    if "task" not in names and default_task is None:
        raise ValidationError("no `task` column and no `task` option: every job needs a task")
    if "data" in names:
        extra = [n for n in names if n not in WRITE_COLUMNS]
        if extra:
            raise ValidationError(
                f"a `data` column is given, so columns {extra} would be lost; drop them, "
                "or drop `data` to have the payload columns serialised as a JSON object"
            )
    elif not [n for n in names if n not in WRITE_COLUMNS]:
        raise ValidationError("no `data` column and no payload column: nothing to enqueue")


def resp(arg: Any) -> bytes:
    """One argument as RESP, encoded by hiredis as the wire encodes it."""
    packed: bytes = hiredis.pack_command((arg,))
    return packed[packed.index(b"\r\n") + 2 :]  # without the "*1" array header


@dataclass(frozen=True, slots=True)
class Chunk:
    """Jobs for one script call: their ids and each job's RESP-encoded arguments."""

    ids: pa.Array  # string
    segments: pa.Array  # binary: one job's script arguments, RESP-encoded
    groups: tuple[str, ...]  # the groups these jobs may be in (for the existence look-up)
    script: str = "enqueue"  # or "enqueue_skip": the script the segments are arguments of

    @property
    def count(self) -> int:
        return len(self.ids)

    def body(self) -> memoryview:
        """Every job's arguments, concatenated: a view of the Arrow buffer, no copy."""
        _, offsets, values = self.segments.buffers()
        first = self.segments.offset
        ends = memoryview(offsets).cast("i")  # int32 offsets of a binary array
        return memoryview(values)[ends[first] : ends[first + self.count]]

    def without(self, ids: set[str]) -> Chunk:
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = pc.invert(pc.is_in(self.ids, value_set=pa.array(sorted(ids), pa.string())))
        return Chunk(self.ids.filter(keep), self.segments.filter(keep), self.groups, self.script)

    def split(self, size: int) -> list[Chunk]:
        return [
            Chunk(self.ids.slice(i, size), self.segments.slice(i, size), self.groups, self.script)
            for i in range(0, self.count, size)
        ]


class _Template:
    """A validated job's script arguments as RESP: constant parts around the id and data.
    With `skip`, the arguments of enqueue_skip when the job needs no more than it takes."""

    def __init__(self, spec: Any, *, skip: bool) -> None:
        opts = spec.record_options() if skip else None
        self.script = "enqueue" if opts is None else "enqueue_skip"
        argv = spec.argv() if opts is None else (spec.id, spec.task, spec.data, opts)
        if argv.count(_ID_SLOT) != 1 or argv.count(_DATA_SLOT) != 1:
            raise RuntimeError("JobSpec.argv() must carry the id and the data once each")
        self.slots: list[str] = []  # "id", "data" or "" (a constant part)
        self.constants: list[bytes] = []
        for arg in argv:
            if arg in (_ID_SLOT, _DATA_SLOT):
                self.slots.append("id" if arg == _ID_SLOT else "data")
            elif self.slots and self.slots[-1] == "":
                self.constants[-1] += resp(arg)
            else:
                self.slots.append("")
                self.constants.append(resp(arg))


class RowEncoder:
    """Encodes the rows of one task. Ids are either the `id` column or
    `<id_prefix>-<row number>`, where the caller's prefix names the partition (and the
    micro-batch), so a retried task or a replayed batch makes the same ids again.

    `request` is the enqueue request id of every job of the write (or micro-batch): the
    enqueue script treats a job whose record carries the same request id as a re-send and
    changes nothing, even while it runs. That is what makes a retried task harmless.

    With `skip` (ifExists=skip), a batch whose jobs take no option but the record's goes to
    enqueue_skip instead, which leaves every id that already is a job alone by itself."""

    def __init__(
        self,
        core: QueueCore,
        *,
        default_task: str | None,
        id_prefix: str,
        request: str,
        validate_data: bool,
        skip: bool = False,
    ) -> None:
        self.core = core
        self.skip = skip
        self.request = request
        self.default_task = default_task
        self.id_prefix = check_job_id(id_prefix)
        self.validate_data = validate_data
        self.max_payload = core.settings.max_payload
        self._templates: dict[tuple[Any, ...], _Template] = {}

    def encode(self, batch: pa.RecordBatch, first_row: int) -> Chunk:
        """Every row of `batch` (the rows before it in the task: `first_row`)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ids = self._ids(batch, first_row)
        data = self._payloads(batch, first_row)
        index, templates = self._templates_of(batch)
        pieces: dict[str, pa.Array] = {"id": _bulk(ids), "data": _bulk(data)}
        parts: list[Any] = []
        constant = 0
        for slot in templates[0].slots:
            if slot:
                parts.append(pieces[slot])
                continue
            values = [t.constants[constant] for t in templates]
            constant += 1
            if index is None:
                parts.append(pa.scalar(values[0], pa.binary()))
            else:
                parts.append(pc.take(pa.array(values, pa.binary()), index))
        segments = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary()))
        return Chunk(ids, segments, self._groups(batch), templates[0].script)

    # --- ids and data -----------------------------------------------------------------

    def _ids(self, batch: pa.RecordBatch, first_row: int) -> pa.Array:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = batch.num_rows
        if "id" not in batch.schema.names:
            numbers = pa.array(range(first_row, first_row + n), pa.int64()).cast(pa.string())
            ids = pc.binary_join_element_wise(f"{self.id_prefix}-", numbers, "")
            check_job_id(f"{self.id_prefix}-{first_row + n}")  # the longest: all fit
            return ids
        ids = batch.column("id")
        if ids.null_count:
            row = pc.index(pc.is_null(ids), True).as_py()
            raise ValidationError(f"row {first_row + row}: the id column is null")
        ids = ids.cast(pa.string())
        valid = pc.match_substring_regex(ids, f"^(?:{ID_PATTERN.pattern})$")
        if not pc.all(valid).as_py():
            row = pc.index(valid, False).as_py()
            check_job_id(ids[row].as_py())  # raises, with the rule in its message
        return ids

    def _payloads(self, batch: pa.RecordBatch, first_row: int) -> pa.Array:
        import pyarrow.compute as pc

        if "data" in batch.schema.names:
            texts = self._data_column(batch.column("data"), first_row)
        else:
            payload = batch.select([n for n in batch.schema.names if n not in WRITE_COLUMNS])
            texts = json_objects(payload)
        sizes = pc.binary_length(texts)
        too_big = pc.greater(sizes, self.max_payload)
        if pc.any(too_big).as_py():
            row = pc.index(too_big, True).as_py()
            raise PayloadTooLargeError(
                f"row {first_row + row}: data is {sizes[row].as_py()} bytes, "
                f"over the {self.max_payload}-byte limit"
            )
        return texts

    def _data_column(self, column: pa.Array, first_row: int) -> pa.Array:
        import pyarrow as pa

        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise ValidationError("the `data` column must be a string of JSON text")
        column = column.cast(pa.string()).fill_null("null")
        if self.validate_data:
            for i, value in enumerate(column.to_pylist()):
                try:
                    serializers.loads(value)
                except ValueError as exc:
                    raise ValidationError(
                        f"data of row {first_row + i} is not JSON: {exc}"
                    ) from None
        return column

    # --- templates: one validated spec per distinct task and options -------------------

    def _templates_of(self, batch: pa.RecordBatch) -> tuple[pa.Array | None, list[_Template]]:
        """The templates of a batch's rows: (per row its template's position or None when
        all share one, the templates)."""
        import pyarrow as pa

        names = [c for c in ("task", *OPTION_COLUMNS) if c in batch.schema.names]
        if not names:
            return None, [self._template(self.default_task, {}, self.skip)]
        codes = None
        for name in names:
            encoded = batch.column(name).dictionary_encode(null_encoding="encode")
            column_codes = encoded.indices.cast(pa.int64())
            if codes is None:
                codes = column_codes
            else:  # combine, then renumber densely so the product stays small
                import pyarrow.compute as pc

                combined = pc.add(pc.multiply(codes, len(encoded.dictionary)), column_codes)
                codes = combined.dictionary_encode().indices.cast(pa.int64())
        assert codes is not None
        index = codes.dictionary_encode().indices
        firsts = (
            pa.table({"t": index, "row": pa.array(range(len(index)), pa.int64())})
            .group_by("t")
            .aggregate([("row", "min")])
            .sort_by("t")
        )
        rows = []
        for row in firsts.column("row_min").to_pylist():
            values = {name: _option(name, batch.column(name)[row].as_py()) for name in names}
            task = values.pop("task", self.default_task)
            rows.append((task, {k: v for k, v in values.items() if v is not None}))
        templates = [self._template(task, given, self.skip) for task, given in rows]
        if len({t.script for t in templates}) > 1:  # one call takes one script's arguments
            templates = [self._template(task, given, False) for task, given in rows]
        return (index if len(templates) > 1 else None), templates

    def _template(self, task: Any, given: dict[str, Any], skip: bool) -> _Template:
        key = (skip, task, *sorted(given.items()))
        template = self._templates.get(key)
        if template is None:
            if task is None:
                raise ValidationError("a row has a null task and there is no `task` option")
            # `id` is set so that no random id is drawn; each row replaces it.
            spec = self.core.spec(str(task), None, {**given, "id": "template"})
            spec = dataclasses.replace(spec, id=_ID_SLOT, data=_DATA_SLOT, request=self.request)
            template = _Template(spec, skip=skip)
            if len(self._templates) >= _TEMPLATE_CACHE_MAX:
                self._templates.clear()
            self._templates[key] = template
        return template

    def _groups(self, batch: pa.RecordBatch) -> tuple[str, ...]:
        if "group" not in batch.schema.names:
            return ()
        import pyarrow.compute as pc

        return tuple(sorted(str(g) for g in pc.unique(batch.column("group")).to_pylist() if g))


def _bulk(values: pa.Array) -> pa.Array:
    """Each value as a RESP bulk string: `$<bytes>\\r\\n<value>\\r\\n`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = values.cast(pa.binary())
    sizes = pc.binary_length(raw).cast(pa.string()).cast(pa.binary())
    crlf = pa.scalar(b"\r\n", pa.binary())
    return pc.binary_join_element_wise(
        pa.scalar(b"$", pa.binary()), sizes, crlf, raw, crlf, pa.scalar(b"", pa.binary())
    )


def _option(column: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return float(value)
    if column == "run_at" and isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # Spark hands timestamps over as UTC
    return value
