// Command kubectl-captf is the captf kubectl plugin: `kubectl captf runs|plans|plan|approve|logs|why`.
// It only wires the streams and prints the error; the commands live in package app.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/captf/captf/cmd/kubectl-captf/app"
)

func main() {
	root := app.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	// The command that failed names the role a 403 asks for.
	cmd, err := root.ExecuteC()
	if err != nil {
		app.PrintError(os.Stderr, cmd, err)
		os.Exit(1)
	}
}
