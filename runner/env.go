package runner

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/captf/captf/jobs"
)

// keptVariables are the TF_* and KUBE_* variables the runtime may see: the Job sets them on
// purpose. Every other TF_* or KUBE_* variable could redirect the backend, the data dir, the CLI
// configuration, the plugin cache, registry tokens or the variables, so it is dropped.
var keptVariables = map[string]bool{
	"TF_IN_AUTOMATION": true,
	"TF_INPUT":         true,
	"KUBE_NAMESPACE":   true,
}

// runtimeEnv derives the runtime's environment from base. It drops the variables that
// configure the runtime (jobs.ConfiguresRuntime) other than keptVariables, forces HOME, TF_DATA_DIR and the XDG base
// directories (where OpenTofu looks for CLI configuration files, credentials and plugins) into
// workdir, keeps TMPDIR or points it at <workdir>/tmp, sets the automation defaults when absent,
// and applies extra last. It returns the environment, the names it dropped (never their values)
// and the TMPDIR it chose. A forced name is replaced, not reported.
func runtimeEnv(base []string, workdir string, extra map[string]string) (env, dropped []string, tmpdir string) {
	forced := map[string]string{
		"HOME":            workdir,
		"TF_DATA_DIR":     filepath.Join(workdir, ".terraform"),
		"XDG_CONFIG_HOME": filepath.Join(workdir, ".config"),
		"XDG_DATA_HOME":   filepath.Join(workdir, ".local", "share"),
		"XDG_CACHE_HOME":  filepath.Join(workdir, ".cache"),
	}
	defaults := map[string]string{
		"TF_IN_AUTOMATION":   "1",
		"TF_INPUT":           "0",
		"CHECKPOINT_DISABLE": "1",
	}
	seen := map[string]bool{}
	for _, kv := range base {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if _, isForced := forced[name]; isForced {
			continue
		}
		if _, isExtra := extra[name]; isExtra {
			continue
		}
		if jobs.ConfiguresRuntime(name) && !keptVariables[name] {
			dropped = append(dropped, name)
			continue
		}
		if name == "TMPDIR" {
			if value == "" {
				continue
			}
			tmpdir = value
		}
		delete(defaults, name)
		env = append(env, kv)
	}
	if tmpdir == "" {
		tmpdir = filepath.Join(workdir, "tmp")
		forced["TMPDIR"] = tmpdir
	}
	for _, m := range []map[string]string{defaults, forced, extra} {
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			env = append(env, name+"="+m[name])
		}
	}
	sort.Strings(dropped)
	return env, dropped, tmpdir
}
