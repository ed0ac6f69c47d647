package rlscore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeArgs(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refresh := metav1.Duration{Duration: DefaultInProcessRefreshInterval}
	tests := []struct {
		name    string
		in      runtime.Object
		want    RLScoreArgs
		wantErr string
	}{
		{name: "nil gives defaults", in: nil,
			want: RLScoreArgs{SuggestionURL: DefaultSuggestionURL, Timeout: metav1.Duration{Duration: DefaultTimeout}, MaxResponseBytes: DefaultMaxResponseBytes, WireFormat: WireCompact, InProcessRefreshInterval: refresh}},
		{name: "json with every field", in: &runtime.Unknown{Raw: []byte(`{"suggestionURL":"https://s:8443/suggest","timeout":"100ms","defaultPolicy":"el","shadow":true,"bearerTokenFile":"` + tokenFile + `","maxResponseBytes":2048,"wireFormat":"json"}`)},
			want: RLScoreArgs{SuggestionURL: "https://s:8443/suggest", Timeout: metav1.Duration{Duration: 100 * time.Millisecond}, DefaultPolicy: "EL", Shadow: true, BearerTokenFile: tokenFile, MaxResponseBytes: 2048, WireFormat: WireJSON, InProcessRefreshInterval: refresh}},
		{name: "json wire format takes any path", in: &RLScoreArgs{SuggestionURL: "http://proxy/rl/score", WireFormat: WireJSON},
			want: RLScoreArgs{SuggestionURL: "http://proxy/rl/score", Timeout: metav1.Duration{Duration: DefaultTimeout}, MaxResponseBytes: DefaultMaxResponseBytes, WireFormat: WireJSON, InProcessRefreshInterval: refresh}},
		{name: "compact needs the /suggest path", in: &RLScoreArgs{SuggestionURL: "http://proxy/rl/score"}, wantErr: "path must end in /suggest"},
		{name: "unknown wire format", in: &RLScoreArgs{WireFormat: "protobuf"}, wantErr: `pluginConfig[RLScore].args.wireFormat: Unsupported value: "protobuf"`},
		{name: "yaml", in: &runtime.Unknown{ContentType: runtime.ContentTypeYAML, Raw: []byte("suggestionURL: http://x/suggest\ntimeout: 1s\n")},
			want: RLScoreArgs{SuggestionURL: "http://x/suggest", Timeout: metav1.Duration{Duration: time.Second}, MaxResponseBytes: DefaultMaxResponseBytes, WireFormat: WireCompact, InProcessRefreshInterval: refresh}},
		{name: "typed args", in: &RLScoreArgs{SuggestionURL: "http://y/suggest"},
			want: RLScoreArgs{SuggestionURL: "http://y/suggest", Timeout: metav1.Duration{Duration: DefaultTimeout}, MaxResponseBytes: DefaultMaxResponseBytes, WireFormat: WireCompact, InProcessRefreshInterval: refresh}},
		{name: "in process", in: &runtime.Unknown{ContentType: runtime.ContentTypeYAML, Raw: []byte("inProcess: true\ninProcessRefreshInterval: 500ms\n")},
			want: RLScoreArgs{SuggestionURL: DefaultSuggestionURL, Timeout: metav1.Duration{Duration: DefaultTimeout}, MaxResponseBytes: DefaultMaxResponseBytes, WireFormat: WireCompact, InProcess: true, InProcessRefreshInterval: metav1.Duration{Duration: 500 * time.Millisecond}}},
		{name: "refresh too often", in: &RLScoreArgs{InProcess: true, InProcessRefreshInterval: metav1.Duration{Duration: time.Millisecond}}, wantErr: `inProcessRefreshInterval: Invalid value: "1ms"`},
		{name: "typo is an error", in: &runtime.Unknown{Raw: []byte(`{"timout":"1s"}`)}, wantErr: `unknown field "timout"`},
		{name: "bad scheme", in: &RLScoreArgs{SuggestionURL: "tcp://localhost:8765"}, wantErr: "scheme must be http or https"},
		{name: "no host", in: &RLScoreArgs{SuggestionURL: "http:///suggest"}, wantErr: "missing host"},
		{name: "timeout too long", in: &RLScoreArgs{Timeout: metav1.Duration{Duration: time.Minute}}, wantErr: `timeout: Invalid value: "1m0s"`},
		{name: "negative timeout", in: &RLScoreArgs{Timeout: metav1.Duration{Duration: -time.Second}}, wantErr: `timeout: Invalid value: "-1s"`},
		{name: "unknown policy", in: &RLScoreArgs{DefaultPolicy: "fast"}, wantErr: `defaultPolicy: Unsupported value: "FAST"`},
		{name: "tiny response limit", in: &RLScoreArgs{MaxResponseBytes: 10}, wantErr: "maxResponseBytes: Invalid value: 10"},
		{name: "several problems at once", in: &RLScoreArgs{SuggestionURL: "ftp://x", DefaultPolicy: "zz"}, wantErr: "scheme must be http or https, pluginConfig[RLScore].args.defaultPolicy: Unsupported value: \"ZZ\""},
		{name: "wrong type", in: &metav1.Status{}, wantErr: "want *RLScoreArgs or runtime.Unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeArgs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestRequestURL(t *testing.T) {
	tests := []struct{ url, wire, want string }{
		{"http://s:8000/suggest", WireCompact, "http://s:8000/v1/scores"},
		{"https://gw.example/rlscore/suggest", WireCompact, "https://gw.example/rlscore/v1/scores"},
		{"http://s:8000/suggest", WireJSON, "http://s:8000/suggest"},
	}
	for _, tt := range tests {
		args := &RLScoreArgs{SuggestionURL: tt.url, WireFormat: tt.wire}
		if got := args.RequestURL(); got != tt.want {
			t.Errorf("%s (%s): got %s, want %s", tt.url, tt.wire, got, tt.want)
		}
	}
}

// TestCheckFiles: the files args name are read when the plugin starts (New), not while validating.
func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	token, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	_ = os.WriteFile(token, []byte("s3cret\n"), 0o600)
	_ = os.WriteFile(empty, nil, 0o600)
	tests := []struct {
		name    string
		args    RLScoreArgs
		wantErr string
	}{
		{"no files", RLScoreArgs{}, ""},
		{"token", RLScoreArgs{BearerTokenFile: token}, ""},
		{"missing token file", RLScoreArgs{BearerTokenFile: "/nonexistent/token"}, "bearerTokenFile: open /nonexistent/token"},
		{"empty token file", RLScoreArgs{BearerTokenFile: empty}, "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// validation alone accepts every one of them: it reads nothing
			args := tt.args
			args.SetDefaults()
			if errs := ValidateArgs(nil, &args); len(errs) > 0 {
				t.Fatalf("ValidateArgs: %v", errs)
			}
			err := CheckFiles(&args)
			if tt.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
			}
			if _, err := New(context.Background(), &args, nil); (err != nil) != (tt.wantErr != "") {
				t.Fatalf("New: %v", err)
			}
		})
	}
}
