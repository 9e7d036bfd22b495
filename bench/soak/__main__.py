"""``python -m bench.soak [--scenario full|short] [--repeat N] [--keep DIR]``.

Prints one table per soak and exits 1 if any soak missed a target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.soak import run
from bench.soak.scenario import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="full")
    parser.add_argument("--repeat", type=int, default=1, help="soaks in a row (default 1)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep each soak's logs, seeds and WARCs under this folder")
    args = parser.parse_args(argv)
    scenario = SCENARIOS[args.scenario]
    tables, failed = [], 0
    for i in range(args.repeat):
        workdir = args.keep / f"soak-{i + 1}" if args.keep else None
        result = run(scenario, workdir)
        tables.append(result.table())
        failed += not result.passed
        print("\n" + tables[-1] + "\n", flush=True)
    if args.repeat > 1:
        print(f"{args.repeat - failed} of {args.repeat} soaks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
