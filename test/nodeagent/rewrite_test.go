package nodeagent

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func testMap() pathMap {
	var b pathMapBuilder
	b.add("/dev/termination-log", "/pod/termination/source")
	b.add("/captf/bin", "/pod/volumes/runner")
	b.add("/captf/work", "/pod/volumes/work")
	b.add("/tmp", "/pod/volumes/tmp")
	b.add("/captf/config/", "/pod/volumes/config")
	// An image path under a mount path: the mount was added first and wins for that exact
	// path, but the longer image path still wins below it.
	b.add("/captf/work", "/image/work")
	b.add("/captf/module", "/repo/modules/basic")
	b.add("/captf/runtime", "/repo/bin/tofu")
	b.add("relative", "/ignored")
	return b.build()
}

func TestArgRewriting(t *testing.T) {
	m := testMap()
	for _, tc := range []struct {
		in, want string
	}{
		{"/captf/work", "/pod/volumes/work"},
		{"/captf/work/", "/pod/volumes/work/"},
		{"/captf/work/root/main.tf", "/pod/volumes/work/root/main.tf"},
		{"/captf/config", "/pod/volumes/config"},
		{"/captf/bin/runner", "/pod/volumes/runner/runner"},
		{"/tmp", "/pod/volumes/tmp"},
		{"/tmpx", "/tmpx"},
		{"/captf/workers", "/captf/workers"},
		{"/captf", "/captf"},
		{"/dev/termination-log", "/pod/termination/source"},
		{"/dev/null", "/dev/null"},
		{"--bin=/captf/runtime", "--bin=/repo/bin/tofu"},
		{"--result=/dev/termination-log", "--result=/pod/termination/source"},
		{"--backend-config=config_path=/captf/work/kc", "--backend-config=config_path=/pod/volumes/work/kc"},
		{"--backend-config=secret_suffix=abc", "--backend-config=secret_suffix=abc"},
		{"--image=registry.example/captf/module:v1", "--image=registry.example/captf/module:v1"},
		{"relative/captf/work", "relative/captf/work"},
		{"//captf/work", "//captf/work"},
		{"x=/tmp/a=b", "x=/pod/volumes/tmp/a=b"},
		{"", ""},
	} {
		if got := m.arg(tc.in); got != tc.want {
			t.Errorf("arg(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestContains(t *testing.T) {
	m := testMap()
	for p, want := range map[string]bool{
		"/repo/bin/tofu":                true,
		"/pod/volumes/runner/runner":    true,
		"/pod/volumes/runner/../../x":   false,
		"/pod/volumes/runnerx/runner":   false,
		"/usr/bin/sh":                   false,
		"/repo/modules/basic/main.tf":   true,
		"/repo/modules/basic-2/main.tf": false,
	} {
		if got := m.contains(p); got != want {
			t.Errorf("contains(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestEnvRewriting(t *testing.T) {
	m := testMap()
	for _, tc := range []struct {
		in, want string
	}{
		{"/captf/work", "/pod/volumes/work"},
		{"/captf/bin:/usr/bin:/tmp/x", "/pod/volumes/runner:/usr/bin:/pod/volumes/tmp/x"},
		{"https://example.com/tmp", "https://example.com/tmp"},
		{"plain", "plain"},
		{"A=/tmp", "A=/pod/volumes/tmp"},
	} {
		if got := m.env(tc.in); got != tc.want {
			t.Errorf("env(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRootImagePath(t *testing.T) {
	var b pathMapBuilder
	b.add("/captf/work", "/pod/work")
	b.add("/", "/rootfs")
	m := b.build()
	for in, want := range map[string]string{
		"/captf/work/x": "/pod/work/x",
		"/usr/bin/env":  "/rootfs/usr/bin/env",
		"/":             "/rootfs",
	} {
		if got := m.arg(in); got != want {
			t.Errorf("arg(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTextRewriting(t *testing.T) {
	m := testMap()
	for _, tc := range []struct {
		in, want string
		changed  bool
	}{
		{`{"module":{"workspace":{"source":"/captf/module"}}}`, `{"module":{"workspace":{"source":"/repo/modules/basic"}}}`, true},
		{`source = "/captf/module/sub" # and /tmp`, `source = "/repo/modules/basic/sub" # and /pod/volumes/tmp`, true},
		{`path: /captf/modules`, `path: /captf/modules`, false},
		{`url: https://host/captf/module`, `url: https://host/captf/module`, false},
		{`a/captf/module`, `a/captf/module`, false},
		{"no paths here", "no paths here", false},
		{"\xff\xfe/captf/module", "\xff\xfe/captf/module", false},
	} {
		got, changed := m.text([]byte(tc.in))
		if string(got) != tc.want || changed != tc.changed {
			t.Errorf("text(%q) = %q, %v; want %q, %v", tc.in, got, changed, tc.want, tc.changed)
		}
	}
}

func TestMergePathMaps(t *testing.T) {
	var a, b pathMapBuilder
	a.add("/captf/config", "/pod/config")
	a.add("/captf/module", "/modules/one")
	b.add("/captf/config", "/pod/config")
	b.add("/captf/module", "/modules/two")
	m := mergePathMaps([]pathMap{a.build(), b.build()})
	if got, _ := m.path("/captf/config/x"); got != "/pod/config/x" {
		t.Errorf("an agreed path: got %q", got)
	}
	if got, ok := m.path("/captf/module"); ok {
		t.Errorf("a conflicting path was rewritten to %q", got)
	}
}

func TestRewriteInCluster(t *testing.T) {
	in := []string{
		"run",
		"--backend-config=secret_suffix=x",
		"--backend-config=in_cluster_config=true",
		"-backend-config=in_cluster_config=true",
		"--backend-config", "in_cluster_config=true",
		"in_cluster_config=true",
		"--backend-config=in_cluster_config=false",
	}
	got, found := rewriteInCluster(in, "/pod/kube/kubeconfig")
	want := []string{
		"run",
		"--backend-config=secret_suffix=x",
		"--backend-config=config_path=/pod/kube/kubeconfig",
		"-backend-config=config_path=/pod/kube/kubeconfig",
		"--backend-config", "config_path=/pod/kube/kubeconfig",
		"in_cluster_config=true",
		"--backend-config=in_cluster_config=false",
	}
	if !found || !reflect.DeepEqual(got, want) {
		t.Errorf("rewriteInCluster = %q, %v; want %q", got, found, want)
	}
	if in[2] != "--backend-config=in_cluster_config=true" {
		t.Error("rewriteInCluster changed its input")
	}
	if usesInCluster([]string{"--backend-config=config_path=/x"}) {
		t.Error("usesInCluster without in_cluster_config")
	}
}

func TestExpand(t *testing.T) {
	env := &envList{}
	env.set("HOME", "/captf/work")
	env.set("EMPTY", "")
	for in, want := range map[string]string{
		"$(HOME)/x":        "/captf/work/x",
		"a$(EMPTY)b":       "ab",
		"$(MISSING)":       "$(MISSING)",
		"$$(HOME)":         "$(HOME)",
		"$$":               "$",
		"cost $5":          "cost $5",
		"$(HOME":           "$(HOME",
		"trailing $":       "trailing $",
		"$(HOME)$(HOME)":   "/captf/work/captf/work",
		"no references at": "no references at",
	} {
		if got := expand(in, env.lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteProjection(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	files := map[string]volumeFile{
		"a.txt":     {data: []byte("alpha"), mode: 0o440},
		"sub/b.txt": {data: []byte("beta"), mode: 0o600},
	}
	if err := writeProjection(dir, files); err != nil {
		t.Fatal(err)
	}
	// Written twice, as after a failed attempt: the layout stays consistent.
	if err := writeProjection(dir, files); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		data string
		mode os.FileMode
	}{"a.txt": {"alpha", 0o440}, "sub/b.txt": {"beta", 0o600}} {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil || string(data) != want.data {
			t.Errorf("%s: %q, %v", name, data, err)
		}
		info, err := os.Stat(p)
		if err != nil || info.Mode().Perm() != want.mode {
			t.Errorf("%s: mode %v, %v; want %v", name, info.Mode().Perm(), err, want.mode)
		}
	}
	for _, link := range []string{"..data", "a.txt", "sub"} {
		info, err := os.Lstat(filepath.Join(dir, link))
		if err != nil || info.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is not a link: %v", link, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 { // ..<stamp>, ..data, a.txt, sub
		t.Errorf("volume holds %d entries, want 4", len(entries))
	}
	if err := writeProjection(dir, map[string]volumeFile{"../escape": {}}); err == nil {
		t.Error("a path out of the volume was accepted")
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := lookPath("tool", "/nonexistent:"+bin, "/"); err != nil || got != exe {
		t.Errorf("lookPath(tool) = %q, %v", got, err)
	}
	if got, err := lookPath("bin/tool", "", dir); err != nil || got != exe {
		t.Errorf("lookPath(bin/tool) = %q, %v", got, err)
	}
	if _, err := lookPath("data", bin, "/"); err == nil {
		t.Error("a file that is not executable was found")
	}
	if _, err := lookPath(exe+"-missing", bin, "/"); err == nil {
		t.Error("a missing file was found")
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := (Config{}).complete(); err == nil {
		t.Error("an empty config was accepted")
	}
	_, err := (Config{
		WorkDir:     "w",
		PodSelector: "a in (",
		Images:      map[string]Image{"x": {Paths: map[string]string{"relative": "/x"}}},
	}).complete()
	if err == nil {
		t.Error("a bad selector and a relative image path were accepted")
	}
}
