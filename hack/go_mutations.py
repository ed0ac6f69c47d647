"""Mutation check for the Go scorer: each mutation below changes one thing the Python core defines (a
feature column, a rule, a weight's use, the pooling, the score mapping); `go test ./pkg/rlscore/` must
fail on every one of them. Run with `make mutations`; prints one line per mutation and exits 1 when a
mutation survives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "plugin-go" / "pkg" / "rlscore"

# (file, text, replacement, what it breaks)
MUTATIONS = [
    ("features.go", "row[3], row[4], row[5], row[6] = cpuShare+podCPU, memShare+podMem, podCPU, podMem",
     "row[3], row[4], row[5], row[6] = cpuShare+podCPU, memShare+podMem, podMem, podCPU",
     "two feature columns swapped"),
    ("features.go", "row[16] = podCPU*(1-cpuShare) + podMem*(1-memShare)",
     "row[16] = podCPU*(1-cpuShare) + podMem*(1-cpuShare)", "one feature's formula"),
    ("features.go", "higher := n - upperBound(sorted, v+scoreTie)",
     "higher := n - upperBound(sorted, v)", "rule standings without the tie tolerance"),
    ("features.go", "f.Nodes[i*F+numStateFeatures+k] = float64(float32(1 - float64(higher)/others))",
     "f.Nodes[i*F+numStateFeatures+k] = float64(float32(1 - float64(higher+1)/others))",
     "rule standing off by one"),
    ("rules.go", "out[i] = -(freeCPU + freeMem)", "out[i] = -(freeCPU + 2*freeMem)", "best-fit's weights"),
    ("rules.go", "cpuRisk, memRisk := clip01((cpuMean+std)/2), clip01(memMean/2)",
     "cpuRisk, memRisk := clip01((cpuMean+std)/2), clip01(memMean/3)", "LoadVariationRiskBalancing"),
    ("rules.go", "return math.RoundToEven(targetUtilization * (100.0 - predicted) / (100.0 - targetUtilization))",
     "return math.Round(targetUtilization * (100.0 - predicted) / (100.0 - targetUtilization))",
     "TargetLoadPacking's rounding"),
    ("model.go", "mean[j] /= float64(n)", "mean[j] /= float64(n + 1)", "mean pooling"),
    ("model.go", "\t\t\tif v > top[j] {\n\t\t\t\ttop[j] = v", "\t\t\tif v < top[j] {\n\t\t\t\ttop[j] = v",
     "max pooling becomes min"),
    ("model.go", "s7 += a * wk[7]", "s7 += a * wk[6]", "one weight read from the wrong column"),
    ("model.go", "const scoreTie = 1e-9", "const scoreTie = 1e-3", "the score tie"),
    ("model.go", "values[i] = low - gap*(best-t)", "values[i] = low - (best - t)", "the gap below the best latency tier"),
    ("model.go", "if tier(i) >= best {", "if tier(i) >= best-1 {", "the best latency tier taken one tier wide"),
    ("model.go", "return f.Nodes[i*F+colActive] }", "return f.Nodes[i*F+colActive+1] }",
     "running-first reads the wrong column"),
]


def survives(file: str, text: str, replacement: str) -> bool:
    path = PKG / file
    original = path.read_text()
    if original.count(text) != 1:
        sys.exit(f"{file}: the text to mutate is not there exactly once (update hack/go_mutations.py): {text!r}")
    path.write_text(original.replace(text, replacement))
    try:
        run = subprocess.run([os.environ.get("GO", "go"), "test", "-count=1", "./pkg/rlscore/"],
                             cwd=PKG.parents[1], capture_output=True, text=True, timeout=900)
        return run.returncode == 0
    finally:
        path.write_text(original)


def main() -> int:
    survivors = 0
    for file, text, replacement, what in MUTATIONS:
        alive = survives(file, text, replacement)
        survivors += alive
        print(f"{'SURVIVED' if alive else 'killed  '}  {file:12s} {what}", flush=True)
    print(f"{len(MUTATIONS) - survivors}/{len(MUTATIONS)} mutations killed by go test")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
