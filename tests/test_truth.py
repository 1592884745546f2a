"""The truth test (bounded; chaos scenario 37 runs it full size): a realistic mix
run by real worker processes, one of them killed mid-run, then a queue and a
group paused; every number an operator sees is checked against a ledger
(chaos/truth.py)."""

from __future__ import annotations

from pathlib import Path

from chaos.truth import run_truth


def _assert(what: str, ok: bool, detail: object) -> None:
    assert ok, f"{what}: {detail}"


def test_every_number_an_operator_sees_matches_the_ledger(
    redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    run_truth(redis_url, queue_name, tmp_path, _assert)
