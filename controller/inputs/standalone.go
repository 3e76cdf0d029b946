package inputs

import (
	"encoding/json"
	"fmt"
)

// Standalone is the rendered root module as a configuration of its own, for running a module
// outside a Job as captf would run it: the module is called from moduleDir instead of
// ModulePath, and the root declares no backend, so its state is local. hack/modulecheck checks
// modules with it, and the run-cost benchmark runs the module directly with it.
func (r Rendered) Standalone(moduleDir string) (map[string]any, error) {
	var root map[string]any
	if err := json.Unmarshal(r.Main, &root); err != nil {
		return nil, fmt.Errorf("reading the rendered %s: %w", MainFile, err)
	}
	delete(root, "terraform")
	call, ok := root["module"].(map[string]any)[ModuleName].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the rendered %s calls no module %q", MainFile, ModuleName)
	}
	call["source"] = moduleDir
	return root, nil
}
