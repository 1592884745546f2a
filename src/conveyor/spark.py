"""`conveyor.spark`: the Spark data sources and pipeline, by their short name.

An alias of `conveyor.integrations.spark` (imported on first use, so the core
never imports PySpark): `conveyor.spark.register(spark)`.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("conveyor.integrations.spark"), name)
