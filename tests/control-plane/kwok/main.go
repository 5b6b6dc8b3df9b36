// kwok for Weft's integration tests: simulates kubelets so pods on fake nodes become Running
// and Ready. Mirrors sigs.k8s.io/kwok/cmd/kwok/main.go.
package main

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeatwithlease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

// defaultStagesArg makes the binary print the stages kwokctl configures by default (node
// initialize, node heartbeat with lease, pod ready/complete/delete), taken from this same kwok
// version, as a config file for --config. kwok alone refuses to start without stages.
const defaultStagesArg = "weft-print-default-stages"

func main() {
	if len(os.Args) == 2 && os.Args[1] == defaultStagesArg {
		docs := []string{
			nodefast.DefaultNodeInit,
			nodeheartbeatwithlease.DefaultNodeHeartbeatWithLease,
			podfast.DefaultPodReady,
			podfast.DefaultPodComplete,
			podfast.DefaultPodDelete,
		}
		for _, d := range docs {
			_, _ = os.Stdout.WriteString("---\n" + strings.TrimSpace(d) + "\n")
		}
		return
	}

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)

	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags",
			"err", err,
		)
		os.Exit(1)
	}

	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	err = command.ExecuteContext(ctx)
	if err != nil {
		logger.Error("Execute exit",
			"err", err,
		)
		os.Exit(1)
	}
}
