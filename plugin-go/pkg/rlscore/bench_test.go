package rlscore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// BenchmarkPreScoreScore measures one scheduling cycle of the plugin (PreScore + Score for every
// node) against a local server that answers from a canned body. The server's own handler time is
// reported separately and subtracted, giving the plugin's overhead per pod.
func BenchmarkPreScoreScore(b *testing.B) {
	for _, bench := range []struct {
		wire  string
		nodes int
	}{{WireJSON, 100}, {WireJSON, 1000}, {WireJSON, 5000}, {WireCompact, 100}, {WireCompact, 1000}, {WireCompact, 5000}} {
		n := bench.nodes
		b.Run(fmt.Sprintf("wire=%s/nodes=%d", bench.wire, n), func(b *testing.B) {
			names := make([]string, n)
			scores := make(map[string]int, n)
			for i := range names {
				names[i] = fmt.Sprintf("node-%05d", i)
				scores[names[i]] = i % 101
			}
			body, _ := json.Marshal(map[string]any{"policy": "EE", "source": "model", "scores": scores})
			compactBody := make([]byte, n)
			for i := range compactBody {
				compactBody[i] = byte(i % 101)
			}
			var serverNanos atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				if r.URL.Path == "/v1/scores" {
					_, _ = io.Copy(io.Discard, r.Body) // a real server reads the body too
					w.Header().Set("X-Rlscore-Policy", "EE")
					w.Header().Set("X-Rlscore-Source", "model")
					_, _ = w.Write(compactBody)
				} else {
					var req SuggestRequest
					_ = json.NewDecoder(r.Body).Decode(&req)
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write(body)
				}
				serverNanos.Add(time.Since(start).Nanoseconds())
			}))
			defer srv.Close()
			p, err := New(context.Background(), &RLScoreArgs{SuggestionURL: srv.URL + "/suggest", WireFormat: bench.wire,
				Timeout: metav1.Duration{Duration: 2 * time.Second}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			pl := p.(*RLScore)
			infos := nodeInfos(names...)
			pod := testPod(map[string]string{AnnotationPolicy: "EE"})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				state := framework.NewCycleState()
				pl.PreScore(ctx, state, pod, infos)
				for _, ni := range infos {
					if s, _ := pl.Score(ctx, state, pod, ni); s == NeutralScore && n == 100 && ni.Node().Name == "node-00001" {
						b.Fatal("benchmark fell back to neutral scores")
					}
				}
			}
			b.StopTimer()
			total := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			server := float64(serverNanos.Load()) / float64(b.N)
			b.ReportMetric(server/1e6, "server-ms/op")
			b.ReportMetric((total-server)/1e6, "plugin-ms/op")
		})
	}
}
