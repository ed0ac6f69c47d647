package rlscore_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/rlscore/rlscore/plugin-go/pkg/rlscore"
)

const examples = "../../../examples/scheduler-config"

// loadExample decodes and validates an example configuration with the scheduler's own code.
func loadExample(t *testing.T, name string) *schedulerapi.KubeSchedulerConfiguration {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, filepath.Join(examples, name))
	if err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	if errs := validation.ValidateKubeSchedulerConfiguration(cfg); errs != nil {
		t.Fatalf("validating %s: %v", name, errs)
	}
	return cfg
}

func TestExampleConfigsDecodeAndTheirArgsValidate(t *testing.T) {
	// the examples, and the configuration deploy/ puts in the rl-scheduler ConfigMap
	for _, name := range []string{"rl-scheduler-weighted.yaml", "rl-scheduler-only.yaml", "../../deploy/base/scheduler-config.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg := loadExample(t, name)
			found := false
			for _, prof := range cfg.Profiles {
				for _, pc := range prof.PluginConfig {
					if pc.Name != rlscore.Name {
						continue
					}
					found = true
					if prof.SchedulerName != "rl-scheduler" {
						t.Errorf("RLScore configured in profile %q", prof.SchedulerName)
					}
					args, err := rlscore.DecodeArgs(pc.Args)
					if err != nil {
						t.Fatal(err)
					}
					if args.Timeout.Duration != 250*time.Millisecond || !strings.HasSuffix(args.SuggestionURL, ":8000/suggest") {
						t.Errorf("args: %+v", args)
					}
				}
			}
			if !found {
				t.Fatal("no RLScore pluginConfig in the rl-scheduler profile")
			}
		})
	}
}

// fakeServer prefers one node and counts the pods it was asked about.
type fakeServer struct {
	mu     sync.Mutex
	prefer string
	asked  map[string]int
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req rlscore.SuggestRequest
	if r.URL.Path == "/v1/scores" { // the compact format: a JSON header line, then one name per line
		body, _ := io.ReadAll(r.Body)
		head, names, _ := strings.Cut(string(body), "\n")
		if err := json.Unmarshal([]byte(head), &req); err != nil {
			http.Error(w, err.Error(), 422)
			return
		}
		req.Nodes = strings.Split(names, "\n")
	} else if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 422)
		return
	}
	f.mu.Lock()
	f.asked[req.Pod.Name]++
	f.mu.Unlock()
	if r.URL.Path == "/v1/scores" {
		out := make([]byte, len(req.Nodes))
		for i, n := range req.Nodes {
			if n == f.prefer {
				out[i] = 100
			}
		}
		w.Header().Set("X-Rlscore-Policy", "EE")
		w.Header().Set("X-Rlscore-Source", "model")
		_, _ = w.Write(out)
		return
	}
	scores := map[string]int{}
	for _, n := range req.Nodes {
		scores[n] = 0
		if n == f.prefer {
			scores[n] = 100
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"policy": "EE", "source": "model", "scores": scores})
}

func node(name string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: v1.NodeStatus{
			Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")},
			Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
}

func pod(name, schedulerName string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Annotations: map[string]string{"rlscore.io/policy": "EE"}},
		Spec: v1.PodSpec{SchedulerName: schedulerName, Containers: []v1.Container{{Name: "nginx", Image: "nginx",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")}}}}},
	}
}

// schedule runs the real scheduler (our plugin registered out of tree, profiles from an example
// configuration) over fake nodes and returns pod -> node bindings.
func schedule(t *testing.T, config, url string, pods []*v1.Pod) map[string]string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := loadExample(t, config)
	for i := range cfg.Profiles {
		for j := range cfg.Profiles[i].PluginConfig {
			if cfg.Profiles[i].PluginConfig[j].Name == rlscore.Name {
				cfg.Profiles[i].PluginConfig[j].Args = &runtime.Unknown{
					Raw: []byte(`{"suggestionURL":"` + url + `","timeout":"200ms"}`)}
			}
		}
	}

	client := fake.NewClientset(node("node-a"), node("node-b"), node("node-c"))
	var mu sync.Mutex
	bindings := map[string]string{}
	client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		binding := action.(clienttesting.CreateAction).GetObject().(*v1.Binding)
		mu.Lock()
		bindings[binding.Name] = binding.Target.Name
		mu.Unlock()
		return true, binding, nil
	})
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, informerFactory, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{rlscore.Name: rlscore.New}))
	if err != nil {
		t.Fatal(err)
	}
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		t.Fatal(err)
	}
	go sched.Run(ctx)
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(bindings)
		mu.Unlock()
		if n == len(pods) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	out := map[string]string{}
	for k, v := range bindings {
		out[k] = v
	}
	return out
}

func TestRealSchedulerFollowsTheServer(t *testing.T) {
	for _, config := range []string{"rl-scheduler-only.yaml", "rl-scheduler-weighted.yaml"} {
		t.Run(config, func(t *testing.T) {
			server := &fakeServer{prefer: "node-b", asked: map[string]int{}}
			srv := httptest.NewServer(server)
			defer srv.Close()
			pods := []*v1.Pod{pod("rl-1", "rl-scheduler"), pod("rl-2", "rl-scheduler"), pod("rl-3", "rl-scheduler"),
				pod("plain-1", "default-scheduler")}
			bindings := schedule(t, config, srv.URL+"/suggest", pods)
			for _, name := range []string{"rl-1", "rl-2", "rl-3"} {
				if bindings[name] != "node-b" {
					t.Errorf("%s bound to %q, want node-b (the server's choice); all: %v", name, bindings[name], bindings)
				}
				if server.asked[name] != 1 {
					t.Errorf("%s: server asked %d times, want once per pod", name, server.asked[name])
				}
			}
			if bindings["plain-1"] == "" {
				t.Errorf("default-scheduler pod not scheduled: %v", bindings)
			}
			if server.asked["plain-1"] != 0 {
				t.Errorf("the default profile must not call the server")
			}
		})
	}
}

func TestRealSchedulerKeepsSchedulingWhenTheServerIsDead(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/suggest"
	srv.Close() // connection refused from now on
	pods := []*v1.Pod{pod("rl-1", "rl-scheduler"), pod("rl-2", "rl-scheduler"), pod("plain-1", "default-scheduler")}
	bindings := schedule(t, "rl-scheduler-only.yaml", url, pods)
	for _, p := range pods {
		if bindings[p.Name] == "" {
			t.Errorf("%s was not scheduled with the server down: %v", p.Name, bindings)
		}
	}
}
