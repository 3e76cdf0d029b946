// Package plan reads the JSON form of an OpenTofu/Terraform plan (`show -json`) and derives what
// the runner reports about it: the change counts, the listed resources, whether it is
// destructive, and the keyed p3: plan hash. It never prints plan values; the only values that
// leave it are the sensitive strings handed to the redactor.
package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/captf/captf/jobs"
)

// Parse decodes `show -json` output. Numbers keep their literal text (json.Number), because the
// plan hash binds numbers as written, not as float64 approximations.
func Parse(data []byte) (*tfjson.Plan, error) {
	p := &tfjson.Plan{}
	p.UseJSONNumber(true)
	if err := json.Unmarshal(bytes.TrimSpace(data), p); err != nil {
		return nil, fmt.Errorf("reading the plan JSON: %w", err)
	}
	return p, nil
}

// Summary is what the result reports about a plan.
type Summary struct {
	// Counts counts managed resources to add, change and destroy; a replace counts as one add
	// and one destroy, as OpenTofu's own plan summary does.
	Counts jobs.Counts
	// Resources are the managed resources with a change, destructive ones first, then in plan
	// order. The result encoder caps the list.
	Resources []jobs.ResourceChange
	// Destructive holds the managed resources whose actions include delete (a delete or a
	// replace in either order), in plan order.
	Destructive []jobs.ResourceChange
}

// IsDestructive reports whether the plan deletes or replaces a resource.
func (s Summary) IsDestructive() bool { return len(s.Destructive) > 0 }

// HasChanges reports whether the plan changes a resource.
func (s Summary) HasChanges() bool { return len(s.Resources) > 0 }

// Summarize counts and lists the managed resource changes of p. Data source reads, no-ops and
// output changes are not counted; forget, import and move alone are not destructive.
func Summarize(p *tfjson.Plan) Summary {
	var s Summary
	var rest []jobs.ResourceChange
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Mode != tfjson.ManagedResourceMode || rc.Change.Actions.NoOp() {
			continue
		}
		actions := rc.Change.Actions
		switch {
		case actions.Create():
			s.Counts.Add++
		case actions.Update():
			s.Counts.Change++
		case actions.Delete():
			s.Counts.Destroy++
		case actions.Replace():
			s.Counts.Add++
			s.Counts.Destroy++
		}
		change := jobs.ResourceChange{Address: rc.Address, Actions: actionStrings(actions)}
		if slices.Contains(actions, tfjson.ActionDelete) {
			s.Destructive = append(s.Destructive, change)
		} else {
			rest = append(rest, change)
		}
	}
	// Destructive changes first, so they survive when the result has to cut the list.
	s.Resources = append(append([]jobs.ResourceChange(nil), s.Destructive...), rest...)
	return s
}

// DestructiveKind names a destructive change as the guard reports it: "replace" when the
// actions also create, else "delete".
func DestructiveKind(actions []string) string {
	if slices.Contains(actions, string(tfjson.ActionCreate)) {
		return "replace"
	}
	return "delete"
}

func actionStrings(actions tfjson.Actions) []string {
	out := make([]string, len(actions))
	for i, a := range actions {
		out[i] = string(a)
	}
	return out
}

// SensitiveStrings returns the string values, and the literal text of the numbers, that the plan
// marks sensitive in resource changes and output changes, so that output can be scrubbed of
// them. Strings shorter than minLen are left out: replacing every "a" in a message would destroy
// it without protecting anything.
func SensitiveStrings(p *tfjson.Plan, minLen int) []string {
	seen := map[string]bool{}
	add := func(value, marks any) {
		collectSensitive(value, marks, false, func(s string) {
			if len(s) >= minLen {
				seen[s] = true
			}
		})
	}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		add(rc.Change.Before, rc.Change.BeforeSensitive)
		add(rc.Change.After, rc.Change.AfterSensitive)
	}
	for _, oc := range p.OutputChanges {
		if oc == nil {
			continue
		}
		add(oc.Before, oc.BeforeSensitive)
		add(oc.After, oc.AfterSensitive)
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return bytes.Compare([]byte(a), []byte(b))
	})
	return out
}

func collectSensitive(value, marks any, inherited bool, found func(string)) {
	sensitive := inherited || marks == true
	switch v := value.(type) {
	case map[string]any:
		for k, child := range v {
			collectSensitive(child, childOf(marks, k), sensitive, found)
		}
	case []any:
		for i, child := range v {
			collectSensitive(child, childOf(marks, i), sensitive, found)
		}
	case string:
		if sensitive {
			found(v)
		}
	case json.Number:
		// A sensitive number (a port, a PIN) prints as its literal text.
		if sensitive {
			found(v.String())
		}
	}
}
