package nodeagent

import (
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// pathMap rewrites paths as a container sees them (volume mounts, image paths, the termination
// message file) to the local paths the agent materialized them at. A process started by the
// agent shares the host's filesystem, so every container path it is handed must be translated.
type pathMap struct {
	// entries are sorted by descending length of the container path, so the longest (most
	// specific) prefix wins, as the innermost mount does in a real container.
	entries []pathEntry
}

type pathEntry struct {
	container string
	local     string
}

// pathMapBuilder collects entries in priority order: the first entry for a container path wins.
type pathMapBuilder struct {
	seen    map[string]bool
	entries []pathEntry
}

// add records that the container path containerPath is local. Relative or empty container
// paths are ignored: only absolute paths can be recognized in arguments.
func (b *pathMapBuilder) add(containerPath, local string) {
	if !strings.HasPrefix(containerPath, "/") || local == "" {
		return
	}
	containerPath = path.Clean(containerPath)
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	if b.seen[containerPath] {
		return
	}
	b.seen[containerPath] = true
	b.entries = append(b.entries, pathEntry{container: containerPath, local: filepath.Clean(local)})
}

func (b *pathMapBuilder) build() pathMap {
	entries := append([]pathEntry(nil), b.entries...)
	sort.SliceStable(entries, func(i, j int) bool { return len(entries[i].container) > len(entries[j].container) })
	return pathMap{entries: entries}
}

// path rewrites p when it is a mapped container path or lies below one. Only absolute paths
// match, and a prefix matches only at a path boundary: /tmp maps /tmp and /tmp/x, not /tmpx.
func (m pathMap) path(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return p, false
	}
	for _, e := range m.entries {
		if e.container == "/" {
			return filepath.Join(e.local, p), true
		}
		if p == e.container {
			return e.local, true
		}
		if strings.HasPrefix(p, e.container+"/") {
			return e.local + p[len(e.container):], true
		}
	}
	return p, false
}

// contains reports whether the local path p lies in one of the map's local paths.
func (m pathMap) contains(p string) bool {
	p = filepath.Clean(p)
	for _, e := range m.entries {
		if p == e.local || strings.HasPrefix(p, e.local+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// arg rewrites one command-line argument: the whole argument when it is a container path (or
// below one), otherwise the part after the first '=' that is one, so --flag=/path and
// --backend-config=config_path=/path forms are rewritten too.
func (m pathMap) arg(a string) string {
	if r, ok := m.path(a); ok {
		return r
	}
	for i := 0; i < len(a); i++ {
		if a[i] != '=' {
			continue
		}
		if r, ok := m.path(a[i+1:]); ok {
			return a[:i+1] + r
		}
	}
	return a
}

// env rewrites an environment value: each element of a ':'-separated list is rewritten like an
// argument, so HOME=/captf/work and PATH=/captf/bin:/usr/bin both work.
func (m pathMap) env(v string) string {
	if !strings.Contains(v, "/") {
		return v
	}
	parts := strings.Split(v, ":")
	for i, p := range parts {
		parts[i] = m.arg(p)
	}
	return strings.Join(parts, ":")
}

// text rewrites container paths embedded in a text file, such as the module source
// "/captf/module" of a rendered root module. A path starts at a '/' that does not follow a path
// character and runs to the first character that cannot be part of a path; it is rewritten
// when it matches like an argument does. Content that is not valid UTF-8 is left alone, since
// it is not text.
func (m pathMap) text(data []byte) ([]byte, bool) {
	if len(m.entries) == 0 || !utf8.Valid(data) {
		return data, false
	}
	s := string(data)
	var b strings.Builder
	changed := false
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '/' || (i > 0 && isPathByte(s[i-1])) {
			continue
		}
		j := i
		for j < len(s) && isPathByte(s[j]) {
			j++
		}
		if r, ok := m.path(s[i:j]); ok {
			b.WriteString(s[last:i])
			b.WriteString(r)
			last = j
			changed = true
		}
		i = j - 1
	}
	if !changed {
		return data, false
	}
	b.WriteString(s[last:])
	return []byte(b.String()), true
}

// isPathByte reports whether c may appear in a path as the text rewriting recognizes it.
func isPathByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '/', '.', '_', '-', '+', '@', '~':
		return true
	}
	return false
}

// mergePathMaps returns the entries on which every map agrees; a container path that two maps send to
// different local paths is dropped, since one file cannot be rewritten for both.
func mergePathMaps(maps []pathMap) pathMap {
	if len(maps) == 0 {
		return pathMap{}
	}
	locals := map[string]string{}
	conflict := map[string]bool{}
	for _, m := range maps {
		for _, e := range m.entries {
			if l, ok := locals[e.container]; ok && l != e.local {
				conflict[e.container] = true
			}
			locals[e.container] = e.local
		}
	}
	var b pathMapBuilder
	for _, m := range maps {
		for _, e := range m.entries {
			if !conflict[e.container] {
				b.add(e.container, e.local)
			}
		}
	}
	return b.build()
}

// inClusterValue is the in-cluster configuration of the kubernetes state backend, which cannot
// work outside a cluster; the agent swaps it for a kubeconfig it writes for the pod.
const inClusterValue = "in_cluster_config=true"

// inClusterFlags are the flags that carry a -backend-config value: the runner's and OpenTofu's.
var inClusterFlags = []string{"--backend-config", "-backend-config"}

// rewriteInCluster replaces in_cluster_config=true backend configuration in args by
// config_path=<kubeconfig>. It reports whether it replaced any.
func rewriteInCluster(args []string, kubeconfig string) ([]string, bool) {
	out := make([]string, len(args))
	copy(out, args)
	found := false
	for i, a := range out {
		for _, f := range inClusterFlags {
			if a == f+"="+inClusterValue {
				out[i] = f + "=config_path=" + kubeconfig
				found = true
			}
			if a == inClusterValue && i > 0 && out[i-1] == f {
				out[i] = "config_path=" + kubeconfig
				found = true
			}
		}
	}
	return out, found
}

// usesInCluster reports whether args carry in_cluster_config=true backend configuration.
func usesInCluster(args []string) bool {
	_, found := rewriteInCluster(args, "")
	return found
}
