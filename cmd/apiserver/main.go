// Command apiserver is the captf aggregated API server. Registered by an APIService, it serves the
// read-only runs and plans of runs.captf.io, computed from the retained Jobs, and the
// plans/approval subresource.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/captf/captf/cmd/apiserver/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
