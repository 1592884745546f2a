"""DataFrame rows (Arrow batches) to validated JobSpecs, on the Spark executors.

Validation is Conveyor's own: each distinct combination of task and options goes through
`QueueCore.spec` (the function `Queue.enqueue` uses), and each row then only swaps in its
id (checked by `check_job_id`) and its data (JSON, checked against the queue's payload
limit). That keeps one implementation of the rules while costing a few microseconds per
row instead of a full `spec()` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from conveyor import serializers
from conveyor.client.core import QueueCore
from conveyor.errors import PayloadTooLargeError, ValidationError
from conveyor.options import check_job_id
from conveyor.protocol.ops import JobSpec

from .schema import WRITE_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RowEncoder", "check_columns"]

# Reserved columns that become enqueue options, in a fixed order (the template cache key).
_OPTION_COLUMNS = (
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
_SPEC_FIELDS = [f.name for f in fields(JobSpec)]
_ID, _DATA, _REQUEST = (_SPEC_FIELDS.index(n) for n in ("id", "data", "request"))


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


class RowEncoder:
    """Encodes the rows of one write. Ids are either the `id` column or
    `<id_prefix>-<row number>`, where the caller's prefix names the partition (and the
    micro-batch), so a retried task or a replayed batch makes the same ids again.

    `request` is the enqueue request id of every job of the write (or micro-batch): the
    enqueue script treats a job whose record carries the same request id as a re-send and
    changes nothing, even while it runs. That is what makes a retried task harmless."""

    def __init__(
        self,
        core: QueueCore,
        *,
        default_task: str | None,
        id_prefix: str,
        request: str,
        validate_data: bool,
    ) -> None:
        self.core = core
        self.request = request
        self.default_task = default_task
        self.id_prefix = id_prefix
        self.validate_data = validate_data
        self.max_payload = core.settings.max_payload
        self._templates: dict[tuple[Any, ...], _SpecMaker] = {}

    def specs(self, batch: pa.RecordBatch, first_row: int) -> list[JobSpec]:
        names = batch.schema.names
        n = batch.num_rows
        columns = {
            name: batch.column(name).to_pylist()
            for name in names
            if name in WRITE_COLUMNS and name != "data"
        }
        ids = columns.get("id") or [f"{self.id_prefix}-{first_row + i}" for i in range(n)]
        tasks = columns.get("task") or [self.default_task] * n
        option_columns = [(c, columns[c]) for c in _OPTION_COLUMNS if c in columns]
        payloads = self._payloads(batch)
        out = []
        for i in range(n):
            options = tuple(_option(c, values[i]) for c, values in option_columns)
            template = self._template(tasks[i], option_columns, options)
            job_id = ids[i]
            if job_id is None:
                raise ValidationError(f"row {first_row + i}: the id column is null")
            data = payloads[i]
            if len(data) > self.max_payload // 4 and len(data.encode()) > self.max_payload:
                raise PayloadTooLargeError(
                    f"row {first_row + i} (id {job_id!r}): data is {len(data.encode())} bytes, "
                    f"over the {self.max_payload}-byte limit"
                )
            out.append(template(check_job_id(str(job_id)), data))
        return out

    def _template(
        self, task: Any, option_columns: list[tuple[str, list[Any]]], options: tuple[Any, ...]
    ) -> _SpecMaker:
        key = (task, options)
        template = self._templates.get(key)
        if template is None:
            if task is None:
                raise ValidationError("a row has a null task and there is no `task` option")
            given = {
                name: value
                for (name, _), value in zip(option_columns, options, strict=True)
                if value is not None
            }
            # `id` is set so no random id is drawn; each row replaces it.
            spec = self.core.spec(str(task), None, {**given, "id": "template"})
            template = _SpecMaker(spec, self.request)
            if len(self._templates) >= _TEMPLATE_CACHE_MAX:
                self._templates.clear()
            self._templates[key] = template
        return template

    def _payloads(self, batch: pa.RecordBatch) -> list[str]:
        if "data" in batch.schema.names:
            texts: list[Any] = batch.column("data").to_pylist()
            for i, value in enumerate(texts):
                if value is None:
                    texts[i] = "null"
                elif not isinstance(value, str):
                    raise ValidationError("the `data` column must be a string of JSON text")
                elif self.validate_data:
                    try:
                        serializers.loads(value)
                    except ValueError as exc:
                        raise ValidationError(f"data of row {i} is not JSON: {exc}") from None
            return texts
        payload = batch.select([n for n in batch.schema.names if n not in WRITE_COLUMNS])
        return [serializers.dumps(row) for row in _jsonable(payload).to_pylist()]


class _SpecMaker:
    """Copies of a template JobSpec with another id, data and request id: positional
    construction from the template's values (a third of `dataclasses.replace`'s cost),
    still correct when JobSpec gains fields."""

    def __init__(self, template: JobSpec, request: str) -> None:
        self.values = [getattr(template, name) for name in _SPEC_FIELDS]
        self.values[_REQUEST] = request

    def __call__(self, job_id: str, data: str) -> JobSpec:
        values = self.values.copy()
        values[_ID], values[_DATA] = job_id, data
        return JobSpec(*values)


def _option(column: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return float(value)
    if column == "run_at" and isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # Spark hands timestamps over as UTC
    return value


def _jsonable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Payload columns whose Python values JSON cannot take, made into ones it can:
    times as ISO-8601 text, decimals as floats. Binary is refused (encode it yourself)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays, names = [], batch.schema.names
    for name, array in zip(names, batch.columns, strict=True):
        kind = array.type
        if pa.types.is_timestamp(kind):
            if kind.tz is None:
                array = array.cast(pa.timestamp(kind.unit, tz="UTC"))
            array = pc.strftime(array, format="%Y-%m-%dT%H:%M:%SZ")
        elif pa.types.is_date(kind) or pa.types.is_time(kind):
            array = array.cast(pa.string())
        elif pa.types.is_decimal(kind):
            array = array.cast(pa.float64())
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise ValidationError(f"payload column {name!r} is binary: JSON cannot carry it")
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=names)
