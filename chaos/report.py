"""Render a results file as a Markdown table (docs/reliability.md, §4, shows the latest run).

.venv/bin/python -m chaos.report [chaos/results/latest.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from chaos.__main__ import RESULTS


def table(summary: dict) -> str:  # type: ignore[type-arg]
    lines = [
        "| # | scenario | jobs | lost (bound) | duplicates | unexpected | kills | max recovery s | "
        "result |",
        "|--:|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for e in summary["scenarios"]:
        rec = "-" if e["max_recovery_s"] is None else f"{e['max_recovery_s']:.2f}"
        failed = [c["what"] for c in e["checks"] if not c["ok"]]
        verdict = "pass" if e["passed"] else "**fail**: " + "; ".join(failed)
        lines.append(
            f"| {e['number']} | {e['name']} | {e['jobs']:,} | {e['lost']} "
            f"({e.get('lost_bound', 0)}) | {e['duplicates']} | "
            f"{e['unexpected']} | {e['kills']} | {rec} | {verdict} |"
        )
    return "\n".join(lines)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "latest.json"
    summary = json.loads(path.read_text())
    print(
        f"Run of {summary['started']}, {summary['scale']} size: Redis {summary['redis']}, "
        f"Python {summary['python']}, {summary['machine']}.\n"
    )
    print(table(summary))


if __name__ == "__main__":
    main()
