package runner

import "runtime/debug"

// version is set at build time with -ldflags "-X github.com/captf/captf/runner.version=<v>".
var version string

// Version is the runner's version: the one set at build time, else the module version Go
// recorded, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
