// Command dist builds the release of the kubectl plugin: the plugin cross-built for each
// platform into a reproducible archive (tar.gz, zip on Windows) with its completion entry,
// sha256sums.txt, and the krew manifest captf.yaml that installs them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/captf/captf/hack/clusterctl/repo"
)

// releases is where a release's assets are published; the default base URL is its version's.
const releases = "https://github.com/captf/captf/releases/download/"

func main() {
	out := flag.String("out", "dist", "the directory to write the archives, "+SumsFile+" and "+ManifestFile+" to")
	version := flag.String("version", repo.Version, "the plugin's version, a semantic version with a leading v")
	baseURL := flag.String("base-url", "", "where the archives are published: each uri is <base-url>/<archive> (default "+releases+"<version>)")
	platforms := flag.String("platforms", targetList(DefaultTargets), "the comma-separated os/arch platforms to build")
	flag.Parse()

	if err := run(context.Background(), *out, *version, *baseURL, *platforms); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, version, baseURL, platforms string) error {
	var targets []Target
	for _, p := range strings.Split(platforms, ",") {
		t, err := ParseTarget(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	if baseURL == "" {
		baseURL = releases + version
	}
	built, err := Dist(ctx, Options{
		RepoRoot: ".", Out: out, Version: version, BaseURL: baseURL, Targets: targets, BuildOutput: os.Stderr,
	})
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Printf("%s  %s\n", b.SHA256, b.Name)
	}
	fmt.Println(out + "/" + ManifestFile)
	return nil
}

func targetList(targets []Target) string {
	names := make([]string, 0, len(targets))
	for _, t := range targets {
		names = append(names, t.String())
	}
	return strings.Join(names, ",")
}
