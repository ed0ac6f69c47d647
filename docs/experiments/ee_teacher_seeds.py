"""EE's teachers picked on 48 training seeds per size band instead of the picking's 10
(docs/training.md, "EE's teachers on 48 seeds", 2026-11-28): which bands' picks were coin flips.

    .venv/bin/python docs/experiments/ee_teacher_seeds.py test2,hardware-unknown,fragmentation --seeds 48

Prints, per family and band, each packing rule's mean objective relative to the best rule per seed
(1 = best on every seed), for rules within 20% of it. These three families took 1315 s on two cores
beside a training run.
"""

import argparse
import time

from agent.learn.teachers import SIZE_BANDS, pick_teachers

SHOWN_WITHIN = 1.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", help="comma-separated EE families")
    parser.add_argument("--seeds", type=int, default=48)
    args = parser.parse_args()
    start = time.time()
    picked = pick_teachers("EE", tuple(args.families.split(",")), seeds=args.seeds, bands=SIZE_BANDS)
    for family_name, record in picked.items():
        rows = [("all sizes", record)] + [(f"<= {b['max_nodes']} nodes", b) for b in record["by_size"]]
        for label, r in rows:
            shown = {k: v for k, v in sorted(r["relative_objective"].items(), key=lambda kv: kv[1]) if v < SHOWN_WITHIN}
            print(f"{family_name:17s} {label:14s} picks {r['teacher']:16s} "
                  + "  ".join(f"{k} {v:.4f}" for k, v in shown.items()))
    print(f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
