package rlscore

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestForwardPassMatchesGolden: a fixed network and features with the Q-values Python's served
// forward pass gives (testdata/forward_golden.json, kept true by tests/test_go_forward_golden.py).
// Unlike the parity test it needs no Python, so `go test` alone catches a wrong weight index.
func TestForwardPassMatchesGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "forward_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Model json.RawMessage `json:"model"`
		Cases []struct {
			Features    []float64 `json:"features"`
			PodFeatures []float64 `json:"pod_features"`
			Q           []float64 `json:"q"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	m, err := ParseModel(golden.Model)
	if err != nil {
		t.Fatalf("golden model: %v (after a feature spec change: python -m tests.test_go_forward_golden)", err)
	}
	if len(golden.Cases) == 0 {
		t.Fatal("no golden cases")
	}
	for k, c := range golden.Cases {
		f := Features{Nodes: c.Features}
		copy(f.Pod[:], c.PodFeatures)
		for _, parallel := range []Parallel{nil, schedulerParallel(4).Until} {
			values := make([]float64, len(c.Q))
			m.QValues(&f, values, &forwardScratch{}, parallel)
			for i, want := range c.Q {
				if math.Abs(values[i]-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Fatalf("case %d (%d nodes), node %d: q %v, golden %v", k, len(c.Q), i, values[i], want)
				}
			}
		}
	}
}
