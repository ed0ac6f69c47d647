package rlscore

import (
	"encoding/json"
	"strings"
	"testing"
)

// goldenExport is one fixture model's export as the golden file holds it (Python's LoadedModel.export).
func goldenExport(t *testing.T, name string) []byte {
	t.Helper()
	var file struct {
		Models map[string]json.RawMessage `json:"models"`
	}
	decodeGolden(t, &file)
	raw, ok := file.Models[name]
	if !ok {
		t.Fatalf("no golden model %s (make golden)", name)
	}
	return raw
}

func TestParseModelRefusesAnAnchoredScorerItCannotServe(t *testing.T) {
	good := goldenExport(t, "anchored-scorer")
	m, err := ParseModel(good)
	if err != nil {
		t.Fatalf("a valid anchored export: %v", err)
	}
	if m.anchor == nil || m.anchorWeight != 3 || m.anchorBest || !m.readsRules {
		t.Fatalf("parsed anchor: %v weight %v best %v readsRules %v", m.anchor != nil, m.anchorWeight, m.anchorBest,
			m.readsRules)
	}
	edit := func(f func(e, anchor map[string]any)) []byte {
		var e map[string]any
		_ = json.Unmarshal(good, &e)
		f(e, e["anchor"].(map[string]any))
		data, _ := json.Marshal(e)
		return data
	}
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"no anchor", "without its anchor", edit(func(e, _ map[string]any) { delete(e, "anchor") })},
		{"anchor on a plain scorer", "names no anchor", edit(func(e, _ map[string]any) { e["format"] = WeightsFormat })},
		{"anchor of a scorer", "its anchor's format", edit(func(_, a map[string]any) { a["format"] = WeightsFormat })},
		{"anchor of another policy", `its anchor is of policy "LB"`, edit(func(_, a map[string]any) { a["policy"] = "LB" })},
		{"negative weight", "anchor weight -1", edit(func(_, a map[string]any) { a["weight"] = -1 })},
		{"huge weight", "anchor weight 1e+06", edit(func(_, a map[string]any) { a["weight"] = 1e6 })},
		{"unknown term", `the anchor's term is "rank"`, edit(func(_, a map[string]any) { a["on"] = "rank" })},
		{"rule without a standing column", `picks "tetris", which has no standing column`, edit(func(_, a map[string]any) {
			a["rules"].([]any)[0] = "tetris"
		})},
		{"unknown rule", "anchor: selector", edit(func(_, a map[string]any) { a["rules"].([]any)[0] = "no-such-rule" })},
		{"best tier", "ranks every candidate", edit(func(e, _ map[string]any) { e["candidates"] = CandidatesBestLatencyTier })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseModel(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an error containing %q, got %v", tt.want, err)
			}
		})
	}
}
