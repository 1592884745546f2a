"""One adapter module per peer: the worker definition and the enqueue calls.

Every module runs in the peers' virtualenv (.venv-bench) and exposes the
interface described in bench/systems.py.
"""
