// Command kubectl-captf is the captf kubectl plugin: `kubectl captf runs|plan|approve|logs|why`.
// It only parses flags and wires the streams; the commands live in package app.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/captf/captf/cmd/kubectl-captf/app"
)

func main() {
	cmd := app.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
