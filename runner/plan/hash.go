package plan

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/captf/captf/jobs"
)

// HashPrefix versions the plan hash: p3 is keyed (HMAC), binds the effect of each change and
// writes each line as a JSON array, so no address can pass for another line's fields. A hash of
// an older version never equals a p3 hash, so its approval never matches a new plan.
const HashPrefix = jobs.PlanHashPrefix

// MinKeyBytes is the shortest plan key the runner accepts.
const MinKeyBytes = 32

// ErrShortKey is returned for a plan key shorter than MinKeyBytes.
var ErrShortKey = errors.New("plan key is shorter than 32 bytes")

// Hash is the p3: hash of a plan: HashPrefix and the hex SHA-256 of the sorted lines joined by
// "\n", each line the canonical JSON array [kind, address, [actions…], hex HMAC-SHA256(key,
// effect)], kind "resource" or "output", so a resource can never pass for an output.
// JSON escapes the quotes and newlines an address may hold (a for_each key can hold anything),
// so the text splits back into exactly the lines and fields it was made of. There is one line
// per resource change that is not a no-op, imports or was moved, and one per output change that
// is not a no-op (address output.<name>). The effect is canonical JSON of what the change does,
// so the hash moves exactly when what would be applied moves, and the key keeps readers of the
// hash from testing guesses of the values. A plan without such lines hashes to the SHA-256 of
// the empty string (jobs.EmptyPlanHash).
func Hash(p *tfjson.Plan, key []byte) (string, error) {
	lines, err := Lines(p, key)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return HashPrefix + hex.EncodeToString(sum[:]), nil
}

// The kinds of change a hash line is for.
const (
	lineResource = "resource"
	lineOutput   = "output"
)

// Lines returns the sorted lines Hash hashes.
func Lines(p *tfjson.Plan, key []byte) ([]string, error) {
	if len(key) < MinKeyBytes {
		return nil, ErrShortKey
	}
	var lines []string
	line := func(kind, address string, actions tfjson.Actions, effect map[string]any) error {
		doc, err := jobs.CanonicalJSON(effect)
		if err != nil {
			return fmt.Errorf("encoding the effect of %s: %w", address, err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write(doc)
		text, err := jobs.CanonicalJSON([]any{kind, address, actionStrings(actions), hex.EncodeToString(mac.Sum(nil))})
		if err != nil {
			return fmt.Errorf("encoding the line of %s: %w", address, err)
		}
		lines = append(lines, string(text))
		return nil
	}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		c := rc.Change
		moved := rc.PreviousAddress != "" && rc.PreviousAddress != rc.Address
		if c.Actions.NoOp() && c.Importing == nil && !moved {
			continue
		}
		effect := changeEffect(c)
		if c.Importing != nil {
			effect["importing"] = map[string]any{"id": c.Importing.ID, "identity": c.Importing.Identity}
		}
		if moved {
			effect["previous_address"] = rc.PreviousAddress
		}
		if rc.DeposedKey != "" {
			effect["deposed"] = rc.DeposedKey
		}
		if err := line(lineResource, rc.Address, c.Actions, effect); err != nil {
			return nil, err
		}
	}
	for name, oc := range p.OutputChanges {
		if oc == nil || oc.Actions.NoOp() {
			continue
		}
		if err := line(lineOutput, "output."+name, oc.Actions, changeEffect(oc)); err != nil {
			return nil, err
		}
	}
	sort.Strings(lines)
	return lines, nil
}

// changeEffect is the effect of one change before import and move details: for a create or
// read the whole planned object, for an update or replace only the leaves that change (value,
// presence, unknown after apply or sensitivity), for a delete or forget nothing.
func changeEffect(c *tfjson.Change) map[string]any {
	effect := map[string]any{}
	var w walker
	switch {
	case c.Actions.Create(), c.Actions.Read():
		w.whole = true
		w.walk(nil, absent, orAbsent(c.After), c.AfterUnknown, nil, c.AfterSensitive)
	case c.Actions.Update(), c.Actions.Replace():
		w.walk(nil, orAbsent(c.Before), orAbsent(c.After), c.AfterUnknown, c.BeforeSensitive, c.AfterSensitive)
	default:
		// delete, forget and no-op bind nothing beyond the address and the actions.
		return effect
	}
	if len(w.leaves) > 0 {
		effect["leaves"] = w.leaves
	}
	return effect
}

// absentValue marks a value that is not there at all, as opposed to JSON null.
type absentValue struct{}

var absent any = absentValue{}

// orAbsent treats a missing root object (the before of a create, the after of a delete) as
// absent rather than null.
func orAbsent(v any) any {
	if v == nil {
		return absent
	}
	return v
}

// walker collects the leaves of a change's effect.
type walker struct {
	// whole emits every present leaf (create, read), not only the changed ones.
	whole  bool
	leaves []map[string]any
}

// walk visits before and after in step with their markers: unknown marks the after-apply
// unknowns, beforeSens and afterSens the sensitive values. A marker is true for the whole
// subtree, or a structure of the value's shape.
func (w *walker) walk(path []any, before, after, unknown, beforeSens, afterSens any) {
	if unknown == true {
		// The value is not known until apply; only its place is bound, not what it was before,
		// so a value this change does not set cannot move the hash.
		leaf := map[string]any{"path": clonePath(path), "unknown": true}
		if afterSens == true {
			leaf["after_sensitive"] = true
		}
		w.leaves = append(w.leaves, leaf)
		return
	}
	if keys, ok := childKeys(before, after, unknown); ok {
		for _, k := range keys {
			w.walk(append(path, k),
				childOf(before, k), childOf(after, k), childOf(unknown, k),
				childOf(beforeSens, k), childOf(afterSens, k))
		}
		return
	}
	_, beforeAbsent := before.(absentValue)
	_, afterAbsent := after.(absentValue)
	if beforeAbsent && afterAbsent {
		return
	}
	bs, as := beforeSens == true, afterSens == true
	same := beforeAbsent == afterAbsent && equalJSON(before, after) && bs == as
	if same && !w.whole {
		return
	}
	leaf := map[string]any{"path": clonePath(path)}
	if !beforeAbsent {
		leaf["before"] = before
	}
	if !afterAbsent {
		leaf["after"] = after
	}
	if bs {
		leaf["before_sensitive"] = true
	}
	if as {
		leaf["after_sensitive"] = true
	}
	w.leaves = append(w.leaves, leaf)
}

// childKeys returns the keys to descend into, or false when before and after are compared as
// one leaf: they descend when both are objects or both are lists, or when one is absent and the
// other a non-empty object or list. Object keys are strings and list indexes numbers, so a map
// key "0" and a list index 0 stay different paths.
func childKeys(before, after, unknown any) ([]any, bool) {
	bm, bIsMap := before.(map[string]any)
	am, aIsMap := after.(map[string]any)
	bl, bIsList := before.([]any)
	al, aIsList := after.([]any)
	_, bAbsent := before.(absentValue)
	_, aAbsent := after.(absentValue)
	switch {
	case bIsMap && aIsMap, bIsMap && aAbsent && len(bm) > 0, aIsMap && bAbsent && len(am) > 0:
		// An unknown attribute is missing from after; its marker still names it.
		um, _ := unknown.(map[string]any)
		return objectKeys(bm, am, um), true
	case bIsList && aIsList, bIsList && aAbsent && len(bl) > 0, aIsList && bAbsent && len(al) > 0:
		n := max(len(bl), len(al))
		if ul, ok := unknown.([]any); ok {
			n = max(n, len(ul))
		}
		keys := make([]any, n)
		for i := range n {
			keys[i] = i
		}
		return keys, true
	}
	return nil, false
}

// objectKeys returns the keys of all the objects, each once, sorted.
func objectKeys(objects ...map[string]any) []any {
	set := map[string]bool{}
	for _, m := range objects {
		for k := range m {
			set[k] = true
		}
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	keys := make([]any, len(names))
	for i, k := range names {
		keys[i] = k
	}
	return keys
}

// childOf steps into a value or marker: a true marker covers its subtree, a missing child is
// absent (for values) or unmarked (for markers).
func childOf(v any, key any) any {
	switch t := v.(type) {
	case bool:
		if t {
			return true
		}
		return nil
	case absentValue:
		return absent
	case map[string]any:
		if k, ok := key.(string); ok {
			if c, ok := t[k]; ok {
				return c
			}
		}
	case []any:
		if i, ok := key.(int); ok && i < len(t) {
			return t[i]
		}
	}
	if v == nil {
		return nil
	}
	return absent
}

func clonePath(path []any) []any {
	if path == nil {
		return []any{}
	}
	return slices.Clone(path)
}

func equalJSON(a, b any) bool {
	ja, errA := jobs.CanonicalJSON(a)
	jb, errB := jobs.CanonicalJSON(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
