package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// Labels and annotations of state backups.
const (
	LabelStateBackup          = "captf.io/state-backup"
	LabelStateBackupSuffix    = "captf.io/state-backup-suffix"
	AnnotationBackupSerial    = "captf.io/state-backup-serial"
	AnnotationBackupLineage   = "captf.io/state-backup-lineage"
	AnnotationBackupTakenAt   = "captf.io/state-backup-taken-at"
	AnnotationBackupResources = "captf.io/state-backup-resources"
	AnnotationBackupSourceJob = "captf.io/state-backup-source-job"
	AnnotationBackupDigest    = "captf.io/state-backup-digest"
	// AnnotationBackupChunks is how many Secrets a backup's state is in, when more than one:
	// the backup holds chunk 0 and jobs.BackupPartName names the others.
	AnnotationBackupChunks = "captf.io/state-backup-chunks"
	// LabelStateBackupPart marks the Secret of a chunk after the first of a backup.
	LabelStateBackupPart       = "captf.io/state-backup-part"
	defaultStateBackupsToKeep  = 5
	backupNamePrefix           = "captf-state-backup-"
	restoreRootModule          = `{"terraform":{"backend":{"kubernetes":{}}}}`
	restoreEmptyVariables      = `{}`
	restoreReasonBackupMissing = "no state backup of serial %s: %s"
)

// BackupName is the name of the backup of a state serial.
func BackupName(suffix string, serial int64) string {
	return jobs.ShortenName(backupNamePrefix+suffix+"-"+strconv.FormatInt(serial, 10), jobs.MaxSecretNameLength)
}

// backupState copies a state serial the controller has not seen before into a backup Secret,
// verbatim, and keeps the newest few. It never runs for a deleted object or an unreadable or
// empty state, and a restore writes the backup's own serial, so it makes no new backup. A
// remembered state was backed up by the pass that read it; only its serial is recorded.
func (p *pass) backupState(ctx context.Context, st state.State, stateSecret *corev1.Secret, remembered bool) error {
	status := p.status()
	if !st.Exists || st.Serial < 1 || !p.obj.GetDeletionTimestamp().IsZero() || st.Serial == status.ObservedStateSerial {
		return nil
	}
	if remembered {
		status.ObservedStateSerial = st.Serial
		return nil
	}
	if stateSecret == nil {
		return nil
	}
	suffix := p.stateSuffix()
	name := BackupName(suffix, st.Serial)
	payload, err := state.Payload(ctx, p.r.APIReader, stateSecret)
	if err != nil {
		return fmt.Errorf("reading state serial %d to back it up: %w", st.Serial, err)
	}
	var existing corev1.Secret
	err = p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &existing)
	switch {
	case err == nil:
		status.ObservedStateSerial = st.Serial
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading state backup %s: %w", name, err)
	}
	chunks := jobs.SplitPayload(payload)
	annotations := map[string]string{
		AnnotationBackupSerial:     strconv.FormatInt(st.Serial, 10),
		AnnotationBackupLineage:    st.Lineage,
		AnnotationBackupTakenAt:    p.now.UTC().Format(time.RFC3339),
		AnnotationBackupResources:  strconv.Itoa(st.Resources),
		AnnotationBackupDigest:     backupDigest(payload),
		state.InputsHashAnnotation: st.InputsHash,
	}
	if len(chunks) > 1 {
		annotations[AnnotationBackupChunks] = strconv.Itoa(len(chunks))
	}
	// The chunks after the first go first: the backup Secret, created last, exists only whole.
	for i := 1; i < len(chunks); i++ {
		labels := p.ownerLabels()
		labels[LabelStateBackupPart] = "true"
		labels[LabelStateBackupSuffix] = suffix
		part := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: jobs.BackupPartName(name, i), Namespace: p.obj.GetNamespace(), Labels: labels,
				Annotations:     map[string]string{AnnotationBackupSerial: annotations[AnnotationBackupSerial]},
				OwnerReferences: []metav1.OwnerReference{p.ownerRef(false)},
			},
			Data: map[string][]byte{jobspec.BackupStateKey: chunks[i]},
		}
		if err := p.createBackupChunk(ctx, part); err != nil {
			return fmt.Errorf("backing up chunk %d of state serial %d: %w", i, st.Serial, err)
		}
	}
	labels := p.ownerLabels()
	labels[LabelStateBackup] = "true"
	labels[LabelStateBackupSuffix] = suffix
	backup := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.obj.GetNamespace(), Labels: labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{p.ownerRef(false)},
		},
		Data: map[string][]byte{jobspec.BackupStateKey: chunks[0]},
	}
	if err := p.r.Client.Create(ctx, backup); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("backing up state serial %d: %w", st.Serial, err)
	}
	status.ObservedStateSerial = st.Serial
	p.event(nil, corev1.EventTypeNormal, EventStateBackedUp, "Backed up state serial %d as %s", st.Serial, name)
	return p.pruneBackups(ctx, suffix)
}

// createBackupChunk creates a backup chunk. A Secret of its name that holds other bytes (left by
// a pass that crashed over another payload, or planted) is replaced, so the backup it belongs
// to can be restored.
func (p *pass) createBackupChunk(ctx context.Context, chunk *corev1.Secret) error {
	err := p.r.Client.Create(ctx, chunk)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	var existing corev1.Secret
	if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(chunk), &existing); err != nil {
		return err
	}
	if ownedByObject(&existing, p.obj) && existing.Labels[LabelStateBackupPart] == "true" && bytes.Equal(existing.Data[jobspec.BackupStateKey], chunk.Data[jobspec.BackupStateKey]) {
		return nil
	}
	if err := p.r.Client.Delete(ctx, &existing, client.Preconditions{UID: &existing.UID}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return p.r.Client.Create(ctx, chunk)
}

// backupDigest is the digest a backup records of the state bytes it copied.
func backupDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// backupProblem says why a Secret of a backup's name is not a backup this controller took of
// this object's state, or "" when it is: anyone who may create Secrets can plant one under the
// name (or a chunk's), and restoring it would replace the state with theirs. It also returns
// how many Secrets the backup's state is in.
func backupProblem(ctx context.Context, reader client.Reader, backup *corev1.Secret, obj client.Object, suffix string) (problem string, chunks int, err error) {
	switch {
	case backup.Labels[LabelStateBackup] != "true" || backup.Labels[LabelStateBackupSuffix] != suffix:
		return backup.Name + " is not labeled as a state backup of this object", 0, nil
	case !ownedByObject(backup, obj):
		return backup.Name + " is not owned by this object", 0, nil
	case backup.Annotations[AnnotationBackupDigest] == "":
		return backup.Name + " records no digest of its state", 0, nil
	}
	chunks = 1
	if text, ok := backup.Annotations[AnnotationBackupChunks]; ok {
		if chunks, err = strconv.Atoi(text); err != nil || chunks < 2 || chunks > jobs.MaxStateParts {
			return fmt.Sprintf("%s records %s=%q, not 2 to %d", backup.Name, AnnotationBackupChunks, text, jobs.MaxStateParts), 0, nil
		}
	}
	joined := backup.Data[jobspec.BackupStateKey]
	for i := 1; i < chunks; i++ {
		var part corev1.Secret
		name := jobs.BackupPartName(backup.Name, i)
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: backup.Namespace, Name: name}, &part); {
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("its chunk %s does not exist", name), 0, nil
		case err != nil:
			return "", 0, fmt.Errorf("reading state backup chunk %s: %w", name, err)
		case part.Labels[LabelStateBackupPart] != "true" || part.Labels[LabelStateBackupSuffix] != suffix || !ownedByObject(&part, obj):
			return fmt.Sprintf("its chunk %s is not a backup chunk of this object", name), 0, nil
		}
		joined = append(joined[:len(joined):len(joined)], part.Data[jobspec.BackupStateKey]...)
	}
	if backup.Annotations[AnnotationBackupDigest] != backupDigest(joined) {
		return backup.Name + " does not match the digest it recorded", 0, nil
	}
	return "", chunks, nil
}

// ownedByObject reports whether any owner reference of o names obj by UID.
func ownedByObject(o metav1.Object, obj client.Object) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == obj.GetUID() {
			return true
		}
	}
	return false
}

// pruneBackups keeps the newest backups; one named by a pending restore is never pruned.
func (p *pass) pruneBackups(ctx context.Context, suffix string) error {
	var list corev1.SecretList
	if err := p.r.APIReader.List(ctx, &list, client.InNamespace(p.obj.GetNamespace()), client.MatchingLabels{LabelStateBackup: "true", LabelStateBackupSuffix: suffix}); err != nil {
		return fmt.Errorf("listing state backups: %w", err)
	}
	serial := func(s *corev1.Secret) int64 {
		n, _ := strconv.ParseInt(s.Annotations[AnnotationBackupSerial], 10, 64)
		return n
	}
	own := list.Items[:0]
	for _, b := range list.Items {
		if ownedByObject(&b, p.obj) { // labels alone prove nothing; never prune another's Secret
			own = append(own, b)
		}
	}
	list.Items = own
	sort.Slice(list.Items, func(i, j int) bool { return serial(&list.Items[i]) > serial(&list.Items[j]) })
	pending := p.obj.GetAnnotations()[jobs.AnnotationRestoreState]
	for i := defaultStateBackupsToKeep; i < len(list.Items); i++ {
		old := &list.Items[i]
		if old.Annotations[AnnotationBackupSerial] == pending {
			continue
		}
		// Its chunks first: a backup found is one whose chunks can still be found.
		chunks, _ := strconv.Atoi(old.Annotations[AnnotationBackupChunks])
		for i := 1; i < min(chunks, jobs.MaxStateParts); i++ {
			var part corev1.Secret
			err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: old.Namespace, Name: jobs.BackupPartName(old.Name, i)}, &part)
			if apierrors.IsNotFound(err) || err == nil && !ownedByObject(&part, p.obj) {
				continue
			}
			if err == nil {
				err = p.r.Client.Delete(ctx, &part, client.Preconditions{UID: &part.UID})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("pruning state backup chunk %s: %w", part.Name, err)
			}
		}
		if err := p.r.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning state backup %s: %w", old.Name, err)
		}
	}
	return nil
}

// restoreData is the per-run Secret of a restore: a root with only the backend and no variables;
// the backup's state reaches the runner through the config volume.
func restoreData() map[string][]byte {
	return map[string][]byte{"main.tf.json": []byte(restoreRootModule), "terraform.tfvars.json": []byte(restoreEmptyVariables)}
}
