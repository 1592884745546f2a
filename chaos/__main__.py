"""`python -m chaos` (`make chaos`): run the scenarios, write chaos/results/latest.json.

python -m chaos                      every scenario at full size
python -m chaos --bounded            the sizes `make test` runs
python -m chaos --only 1,2,16        some of them (numbers or names)
python -m chaos --skip soak          all but some
python -m chaos --seed 7 --keep      reproducible randomness; keep logs and ledgers
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from chaos.scenarios import load_all, run_scenario
from conveyor.integrations.redis_server import find_redis_server, server_version

RESULTS = Path(__file__).resolve().parent / "results"


def _select(spec: str | None) -> set[str]:
    return {part.strip() for part in spec.split(",") if part.strip()} if spec else set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", help="comma-separated scenario numbers or names")
    parser.add_argument("--skip", help="comma-separated scenario numbers or names")
    parser.add_argument("--bounded", action="store_true", help="the bounded sizes of make test")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)

    scenarios = load_all()
    only, skip = _select(args.only), _select(args.skip)
    chosen = [
        sc for sc in scenarios.values()
        if (not only or sc.name in only or str(sc.number) in only)
        and sc.name not in skip and str(sc.number) not in skip
    ]  # fmt: skip
    binary = args.redis_server or find_redis_server()
    work = Path(tempfile.mkdtemp(prefix="conveyor-chaos-"))
    summary = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "scale": "bounded" if args.bounded else "full",
        "redis": ".".join(map(str, server_version(binary))),
        "redis_server": binary,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "scenarios": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    failed = []
    for sc in chosen:
        print(f"== {sc.number:2d} {sc.name}: {sc.title}", flush=True)
        result = run_scenario(
            sc.name, base_dir=work, bounded=args.bounded, binary=binary, seed=args.seed
        )
        print(result.report(), flush=True)
        entry = {"number": sc.number, **result.as_json()}
        summary["scenarios"].append(entry)  # type: ignore[attr-defined]
        args.out.write_text(json.dumps(summary, indent=2) + "\n")  # after each: partial runs count
        if not result.passed:
            failed.append(sc.name)
    print()
    print(
        f"{'#':>2} {'scenario':28} {'jobs':>8} {'lost':>5} {'dup':>5} {'unexp':>5} "
        f"{'kills':>5} {'recov s':>7}  result"
    )
    for e in summary["scenarios"]:  # type: ignore[attr-defined]
        rec = "-" if e["max_recovery_s"] is None else f"{e['max_recovery_s']:.2f}"
        print(
            f"{e['number']:2d} {e['name']:28} {e['jobs']:8d} {e['lost']:5d} {e['duplicates']:5d} "
            f"{e['unexpected']:5d} {e['kills']:5d} {rec:>7}  {'PASS' if e['passed'] else 'FAIL'}"
        )
    print(f"\nresults: {args.out}")
    if failed or args.keep:
        print(f"logs, ledgers and Redis files: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
