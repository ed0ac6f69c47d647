// Command kube-scheduler is the upstream kube-scheduler with the RLScore score plugin registered.
// Enable it per profile in the KubeSchedulerConfiguration (see examples/scheduler-config/).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/rlscore/rlscore/plugin-go/pkg/rlscore"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(rlscore.Name, rlscore.New))
	os.Exit(cli.Run(command))
}
