// Command runner runs inside a captf Job: `runner copy` installs it into the Job's shared volume
// and `runner run` drives OpenTofu/Terraform for one operation and reports the result as the
// container's termination message.
package main

import (
	"flag"
	"fmt"
	"os"
)

const usage = `Usage: runner <command> [flags]

Commands:
  copy <dest>   copy this binary to dest (the init container installs the runner this way)
  run           run one operation (--op=apply|plan|destroy|refresh|drift|restore)
  version       print the version

Exit codes: 0 success, 1 failure, 2 usage error.
`

func main() {
	flag.Usage = func() { fmt.Fprint(flag.CommandLine.Output(), usage) }
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "runner: command %q is not available in this build\n", flag.Arg(0))
	os.Exit(2)
}
