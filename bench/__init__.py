"""Conveyor's benchmark against the peers and Redis's own ceiling (bench/README.md).

Run from the repository root: `make bench` or `.venv/bin/python -m bench --help`.
Nothing here is imported by Conveyor or its tests except tests/test_bench_smoke.py.
"""
