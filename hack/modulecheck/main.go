// Command modulecheck checks a module before it ships in a module image, as captf will run it:
// it renders the root module captf renders for the role (controller/inputs), pointed at the
// module directory, with one more output per output the role requires, then runs
// `tofu init` with providers from the given mirror only (and, when the module ships
// .terraform.lock.hcl, -lockfile=readonly, as the runner does) and `tofu validate`. So it fails
// when a provider is missing from the mirror or differs from the lock file, when the module
// does not declare a contract input of its role or a variable the object passes, and when it
// lacks an output of its role. It creates nothing: nothing is planned or applied.
//
//	modulecheck --role=machine --module=artifacts/samples/modules/machine --providers=bin/providers
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/runner"
)

func main() {
	role := flag.String("role", "", "the module's role: cluster, machine or machinepool")
	module := flag.String("module", "", "the module directory")
	providers := flag.String("providers", "", "the provider mirror the image ships (a filesystem mirror); empty: the module must need no provider")
	variables := flag.String("variables", "{}", "the object's spec.variables, as JSON")
	tofu := flag.String("tofu", "tofu", "the OpenTofu binary")
	flag.Parse()
	if err := run(contract.Role(*role), *module, *providers, *variables, *tofu, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modulecheck:", err)
		os.Exit(1)
	}
	fmt.Printf("modulecheck: %s is a %s module captf can run\n", *module, *role)
}

// run checks the module, writing OpenTofu's output to out.
func run(role contract.Role, module, providers, variables, tofu string, out io.Writer) error {
	if contract.RequiredOutputs(role) == nil {
		return fmt.Errorf("--role %q is not cluster, machine or machinepool", role)
	}
	if module == "" {
		return errors.New("--module is required")
	}
	module, err := filepath.Abs(module)
	if err != nil {
		return err
	}
	// The commands run in the check's directory: a relative path must not depend on it.
	if tofu, err = exec.LookPath(tofu); err != nil {
		return err
	}
	if tofu, err = filepath.Abs(tofu); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "modulecheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeRoot(dir, role, module, variables); err != nil {
		return err
	}
	// Providers come from the mirror only, as in a run; without one, from an empty mirror, so a
	// module that needs a provider fails. Nothing of the caller's OpenTofu configuration counts.
	if providers == "" {
		providers = filepath.Join(dir, "no-providers")
		if err := os.Mkdir(providers, 0o700); err != nil {
			return err
		}
	}
	if providers, err = filepath.Abs(providers); err != nil {
		return err
	}
	cli := filepath.Join(dir, "cli.tfrc")
	if err := os.WriteFile(cli, []byte(runner.MirrorOnlyCLIConfig(providers)), 0o600); err != nil {
		return err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"TF_DATA_DIR=" + filepath.Join(dir, ".terraform"), "TF_CLI_CONFIG_FILE=" + cli}
	initArgs := []string{"init", "-input=false", "-backend=false"}
	pinned, err := runner.CopyModuleLock(module, dir)
	if err != nil {
		return err
	}
	if pinned {
		initArgs = append(initArgs, "-lockfile=readonly")
	}
	for _, args := range [][]string{initArgs, {"validate"}} {
		cmd := exec.Command(tofu, append(args, "-no-color")...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("tofu %s: %w", args[0], err)
		}
	}
	return nil
}

// writeRoot writes the root module captf renders for the role, with the module's own
// directory as its source, no backend, and an output per required output of the role, which
// `tofu validate` refuses when the module does not declare it.
func writeRoot(dir string, role contract.Role, module, variables string) error {
	in := contract.Inputs{Role: role, ClusterName: "check", Namespace: "default", Name: "check", ClusterOutputs: json.RawMessage("{}")}
	rendered, err := inputs.Render("modulecheck", in.Variables(), []byte(variables), nil, field.NewPath("spec", "variables"))
	if err != nil {
		return err
	}
	root, err := rendered.Standalone(module)
	if err != nil {
		return err
	}
	outputs := map[string]any{}
	for _, out := range contract.RequiredOutputs(role) {
		outputs["contract_"+out] = map[string]any{"value": "${module." + inputs.ModuleName + "." + out + "}", "sensitive": true}
	}
	root["output"] = outputs
	main, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, inputs.MainFile), main, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, inputs.VarsFile), rendered.Vars, 0o600)
}
