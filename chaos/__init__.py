"""Conveyor's chaos, fault and hostile-input suite (docs/reliability.md).

Real worker processes, private redis-servers, a ledger outside Redis and a checker.
`python -m chaos` runs the full-size scenarios; tests/chaos runs bounded versions.
"""
