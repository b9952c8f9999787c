"""Rewrite every golden file from the current engine: `make golden`, then review the diff."""

from __future__ import annotations

from golden_cases import CASES, HERE, replay


def main() -> None:
    for case in sorted(CASES):
        lines = replay(case)
        (HERE / f"{case}.jsonl").write_text("".join(f"{line}\n" for line in lines))
        print(f"{case}: {len(lines)} events")


if __name__ == "__main__":
    main()
