"""`python -m conveyor` is the `conveyor` command."""

from conveyor.integrations.cli import run

run()
