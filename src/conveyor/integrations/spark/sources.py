"""The two Spark data sources: `conveyor` (jobs) and `conveyor_events` (lifecycle events).

Only the construction lives here; reading, writing and events each have their module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from conveyor.errors import ConfigurationError

from .options import Options
from .schema import EVENTS_DDL, JOBS_DDL

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["EventsDataSource", "JobsDataSource"]


class JobsDataSource(DataSource):
    """`format("conveyor")`: batch read of jobs; batch and streaming write of jobs."""

    @classmethod
    def name(cls) -> str:
        return "conveyor"

    def schema(self) -> str:
        return JOBS_DDL

    def _options(self) -> Options:
        return Options(self.options, source=self.name())

    def reader(self, schema: StructType) -> Any:
        from .reader import make_reader

        return make_reader(self._options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import make_writer

        _refuse_overwrite(overwrite)
        return make_writer(self._options(), schema, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import make_writer

        _refuse_overwrite(overwrite)
        return make_writer(self._options(), schema, streaming=True)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise ConfigurationError(
            "format conveyor only appends jobs: use .mode('append') "
            "(overwrite would have to mean purging the queue, which a write never does)"
        )


class EventsDataSource(DataSource):
    """`format("conveyor_events")`: batch and streaming read of the events stream."""

    @classmethod
    def name(cls) -> str:
        return "conveyor_events"

    def schema(self) -> str:
        return EVENTS_DDL

    def _options(self) -> Options:
        return Options(self.options, source=self.name())

    def reader(self, schema: StructType) -> Any:
        from .events import make_events_reader

        return make_events_reader(self._options(), schema)

    def streamReader(self, schema: StructType) -> Any:
        from .events import make_events_stream

        return make_events_stream(self._options(), schema)
