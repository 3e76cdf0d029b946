package nodeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Modes of projected files when the pod sets none, as the API defaults them.
const defaultFileMode int32 = 0o644

// volumeFile is one file of a Secret, ConfigMap, downward API or projected volume.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// volumeDir is where a pod's volume is materialized.
func (w *podWorker) volumeDir(name string) string {
	return filepath.Join(w.dir, "volumes", name)
}

// materializeVolumes creates every volume of the pod that containers mount. A missing Secret,
// ConfigMap or ServiceAccount is a *waitError: the pod waits, as it waits on a kubelet's
// MountVolume.SetUp. contents maps a volume name to the path map its text files are rewritten
// with, when the agent rewrites volume files.
func (w *podWorker) materializeVolumes(ctx context.Context, pod *corev1.Pod, contents map[string]pathMap) error {
	cache := &objectCache{w: w}
	// Resolve everything first, so a volume that waits leaves no half-written sibling behind.
	type pending struct {
		dir   string
		files map[string]volumeFile
	}
	var writes []pending
	for _, v := range pod.Spec.Volumes {
		dir := w.volumeDir(v.Name)
		var files map[string]volumeFile
		var err error
		switch {
		case v.EmptyDir != nil:
			// World-writable like the kubelet's, since containers may run as any user.
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
			continue
		case v.HostPath != nil:
			continue // mounted as the host path itself
		case v.Secret != nil:
			files, err = w.secretFiles(ctx, cache, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, v.Secret.DefaultMode)
		case v.ConfigMap != nil:
			files, err = w.configMapFiles(ctx, cache, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, v.ConfigMap.DefaultMode)
		case v.DownwardAPI != nil:
			files, err = w.downwardAPIFiles(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
		case v.Projected != nil:
			files, err = w.projectedFiles(ctx, cache, pod, v.Projected)
		default:
			return configError("volume %q: only emptyDir, hostPath, secret, configMap, downwardAPI and projected volumes are supported by the node agent", v.Name)
		}
		if err != nil {
			var we *waitError
			if errors.As(err, &we) {
				return &waitError{reason: we.reason, message: fmt.Sprintf("MountVolume.SetUp failed for volume %q : %s", v.Name, we.message)}
			}
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if m, ok := contents[v.Name]; ok {
			for p, f := range files {
				if data, changed := m.text(f.data); changed {
					f.data = data
					files[p] = f
				}
			}
		}
		writes = append(writes, pending{dir: dir, files: files})
	}
	for _, p := range writes {
		if err := writeProjection(p.dir, p.files); err != nil {
			return err
		}
	}
	return nil
}

// mountLocal is the local path of a volume mount, or "" for a volume that does not exist.
func (w *podWorker) mountLocal(pod *corev1.Pod, m corev1.VolumeMount) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name != m.Name {
			continue
		}
		base := w.volumeDir(v.Name)
		if v.HostPath != nil {
			base = v.HostPath.Path
		}
		if m.SubPath != "" {
			return filepath.Join(base, filepath.FromSlash(path.Clean("/"+m.SubPath)))
		}
		return base
	}
	return ""
}

func (w *podWorker) secretFiles(ctx context.Context, cache *objectCache, name string, items []corev1.KeyToPath, opt *bool, defaultMode *int32) (map[string]volumeFile, error) {
	s, err := cache.secret(ctx, name)
	if err != nil {
		return nil, err
	}
	if s == nil {
		if optional(opt) {
			return map[string]volumeFile{}, nil
		}
		return nil, &waitError{reason: "ContainerCreating", message: fmt.Sprintf("secret %q not found", name)}
	}
	return keyFiles("Secret", name, s.Data, items, opt, defaultMode)
}

func (w *podWorker) configMapFiles(ctx context.Context, cache *objectCache, name string, items []corev1.KeyToPath, opt *bool, defaultMode *int32) (map[string]volumeFile, error) {
	m, err := cache.configMap(ctx, name)
	if err != nil {
		return nil, err
	}
	if m == nil {
		if optional(opt) {
			return map[string]volumeFile{}, nil
		}
		return nil, &waitError{reason: "ContainerCreating", message: fmt.Sprintf("configmap %q not found", name)}
	}
	data := make(map[string][]byte, len(m.Data)+len(m.BinaryData))
	for k, v := range m.Data {
		data[k] = []byte(v)
	}
	for k, v := range m.BinaryData {
		data[k] = v
	}
	return keyFiles("ConfigMap", name, data, items, opt, defaultMode)
}

// keyFiles lays out the keys of a Secret or ConfigMap: every key as a file of its name, or only
// the listed items at their paths and modes.
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, opt *bool, defaultMode *int32) (map[string]volumeFile, error) {
	mode := fileMode(defaultMode, nil)
	files := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = volumeFile{data: v, mode: mode}
		}
		return files, nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			if optional(opt) {
				continue
			}
			return nil, &waitError{reason: "ContainerCreating", message: fmt.Sprintf("references non-existent %s key %s in %s %q", strings.ToLower(kind), item.Key, kind, name)}
		}
		files[item.Path] = volumeFile{data: v, mode: fileMode(defaultMode, item.Mode)}
	}
	return files, nil
}

func (w *podWorker) downwardAPIFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, defaultMode *int32) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	for _, item := range items {
		if item.FieldRef == nil {
			return nil, configError("downward API file %q: only fieldRef is supported by the node agent", item.Path)
		}
		v, err := w.fieldValue(pod, item.FieldRef.FieldPath)
		if err != nil {
			return nil, err
		}
		files[item.Path] = volumeFile{data: []byte(v), mode: fileMode(defaultMode, item.Mode)}
	}
	return files, nil
}

func (w *podWorker) projectedFiles(ctx context.Context, cache *objectCache, pod *corev1.Pod, p *corev1.ProjectedVolumeSource) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	add := func(more map[string]volumeFile) {
		for k, v := range more {
			files[k] = v
		}
	}
	for _, src := range p.Sources {
		switch {
		case src.Secret != nil:
			more, err := w.secretFiles(ctx, cache, src.Secret.Name, src.Secret.Items, src.Secret.Optional, p.DefaultMode)
			if err != nil {
				return nil, err
			}
			add(more)
		case src.ConfigMap != nil:
			more, err := w.configMapFiles(ctx, cache, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, p.DefaultMode)
			if err != nil && src.ConfigMap.Name == rootCAConfigMap {
				// No root CA publisher runs in a local control plane; the agent knows the CA.
				more, err = map[string]volumeFile{}, nil
				for _, item := range src.ConfigMap.Items {
					if item.Key == "ca.crt" {
						more[item.Path] = volumeFile{data: w.a.cfg.APIServerCA, mode: fileMode(p.DefaultMode, item.Mode)}
					}
				}
			}
			if err != nil {
				return nil, err
			}
			add(more)
		case src.DownwardAPI != nil:
			more, err := w.downwardAPIFiles(pod, src.DownwardAPI.Items, p.DefaultMode)
			if err != nil {
				return nil, err
			}
			add(more)
		case src.ServiceAccountToken != nil:
			t := src.ServiceAccountToken
			expiration := w.a.cfg.TokenExpiration
			if t.ExpirationSeconds != nil {
				expiration = time.Duration(*t.ExpirationSeconds) * time.Second
			}
			var audiences []string
			if t.Audience != "" {
				audiences = []string{t.Audience}
			}
			token, _, err := w.requestToken(ctx, pod, audiences, expiration)
			if err != nil {
				return nil, err
			}
			files[t.Path] = volumeFile{data: []byte(token), mode: fileMode(p.DefaultMode, nil)}
		default:
			return nil, configError("projected volume: only secret, configMap, downwardAPI and serviceAccountToken sources are supported by the node agent")
		}
	}
	return files, nil
}

// rootCAConfigMap is the ConfigMap of the cluster CA that ServiceAccount admission projects.
const rootCAConfigMap = "kube-root-ca.crt"

func fileMode(defaultMode, itemMode *int32) os.FileMode {
	switch {
	case itemMode != nil:
		return os.FileMode(*itemMode) & os.ModePerm
	case defaultMode != nil:
		return os.FileMode(*defaultMode) & os.ModePerm
	}
	return os.FileMode(defaultFileMode)
}

// writeProjection writes files into dir in the kubelet's atomic-writer layout: the files live
// in a timestamped directory, "..data" links to it, and each top-level name is a link through
// "..data". Programs written for Secret volumes (the runner among them) expect links there.
func writeProjection(dir string, files map[string]volumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	stamp := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.") + hex.EncodeToString(suffix)
	if err := os.Mkdir(filepath.Join(dir, stamp), 0o755); err != nil {
		return err
	}
	top, err := writeProjectedFiles(filepath.Join(dir, stamp), files)
	if err != nil {
		return err
	}
	if err := linkProjection(dir, stamp, top); err != nil {
		return err
	}
	// Drop the files of an earlier attempt.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..") && e.Name() != stamp {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// writeProjectedFiles writes files, at their exact modes, under the timestamped directory
// stampDir. It returns the top-level names they occupy.
func writeProjectedFiles(stampDir string, files map[string]volumeFile) (map[string]bool, error) {
	top := map[string]bool{}
	for _, p := range sortedKeys(files) {
		clean := path.Clean(p)
		if clean == "." || strings.HasPrefix(clean, "/") || strings.HasPrefix(clean, "..") {
			return nil, fmt.Errorf("volume file path %q is not a relative path inside the volume", p)
		}
		f := files[p]
		target := filepath.Join(stampDir, filepath.FromSlash(clean))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(target, f.data, f.mode); err != nil {
			return nil, err
		}
		// WriteFile's mode is filtered by the umask; the pod asked for exactly this one.
		if err := os.Chmod(target, f.mode); err != nil {
			return nil, err
		}
		top[strings.SplitN(clean, "/", 2)[0]] = true
	}
	return top, nil
}

// linkProjection points dir's "..data" at stamp, replacing the link atomically, and links each
// top-level name that is not there yet through "..data".
func linkProjection(dir, stamp string, top map[string]bool) error {
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(stamp, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for _, name := range sortedKeys(top) {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	return nil
}
