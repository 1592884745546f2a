"""Integrations built on the public API: CLI, dashboard, Spark, embedded Redis, metrics."""
