package registry

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/captf/captf/apis/runs"
)

// none is what a cell shows for a missing value, as kubectl does.
const none = "<none>"

var runColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the run, the name of its Job."},
	{Name: "Target", Type: "string", Description: "The object the run belongs to, as kind/name."},
	{Name: "Op", Type: "string", Description: "The operation: apply, plan, destroy, refresh, drift or restore."},
	{Name: "Attempt", Type: "integer", Description: "The attempt number within the operation."},
	{Name: "Retry", Type: "integer", Description: "1 plus the counted failures of the operation before this run since its last success."},
	{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded, Failed, DeadlineExceeded, Interrupted, Blocked, PlanChanged or PlanUnreadable."},
	{Name: "Age", Type: "string", Description: "Time since the run was created."},
	{Name: "Duration", Type: "string", Description: "From start to finish, or until now while the run runs."},
	{Name: "Next-Retry", Type: "string", Description: "Time left in the operation's backoff window, on its newest counted failure."},
	{Name: "Retention", Type: "string", Priority: 1, Description: "Why the run is still kept, or BeyondLimit when the next prune deletes it."},
	{Name: "Error", Type: "string", Priority: 1, Description: "The kind and step of the error a failed run ended with."},
}

var planColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the plan, the name of its Job."},
	{Name: "Target", Type: "string", Description: "The object the plan would change, as kind/name."},
	{Name: "Source", Type: "string", Description: "Plan, ChangedApply or BlockedApply."},
	{Name: "Phase", Type: "string", Description: "Planning, AwaitingApproval, Approved, Applied, Superseded, Changed, Failed or Unverified."},
	{Name: "Add", Type: "integer", Description: "Resources the plan creates."},
	{Name: "Change", Type: "integer", Description: "Resources the plan updates in place."},
	{Name: "Destroy", Type: "integer", Description: "Resources the plan deletes or replaces."},
	{Name: "Approved-By", Type: "string", Description: "The user whose approval names the plan."},
	{Name: "Age", Type: "string", Description: "Time since the plan's Job was created."},
	{Name: "Approval-Hash", Type: "string", Priority: 1, Description: "The hash an approval must quote in spec.planHash."},
	{Name: "Destructive", Type: "boolean", Priority: 1, Description: "Whether a change deletes or replaces a resource."},
}

// tableConvertor renders runs or plans as a Table; rows come from row.
type tableConvertor struct {
	columns []metav1.TableColumnDefinition
	row     func(obj runtime.Object, now time.Time) ([]any, bool)
	now     func() time.Time
}

// ConvertToTable implements rest.TableConvertor for a single object and for a list.
func (c tableConvertor) ConvertToTable(_ context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = c.columns
	}
	now := c.now()
	add := func(obj, rowObject runtime.Object) error {
		cells, ok := c.row(obj, now)
		if !ok {
			return fmt.Errorf("cannot render %T as a table row", obj)
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: rowObject}})
		return nil
	}
	if meta.IsListType(object) {
		items, err := meta.ExtractList(object)
		if err != nil {
			return nil, err
		}
		whole := wantsWholeObjects(tableOptions)
		table.Rows = make([]metav1.TableRow, 0, len(items))
		for _, item := range items {
			rowObject := item
			if !whole {
				if rowObject, err = metadataOnly(item); err != nil {
					return nil, err
				}
			}
			if err := add(item, rowObject); err != nil {
				return nil, err
			}
		}
		if l, err := meta.ListAccessor(object); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
		if !whole {
			// The rows no longer point into the list, so its items can be collected while
			// the server encodes the Table: a whole list's peak memory holds the rows and the
			// response, not every run twice over.
			if err := meta.SetList(object, nil); err != nil {
				return nil, err
			}
		}
		return table, nil
	}
	if err := add(object, object); err != nil {
		return nil, err
	}
	if m, err := meta.Accessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}

// wantsWholeObjects reports whether the Table's rows must carry whole objects: only when the
// client asks with includeObject=Object (kubectl does for --sort-by). Otherwise the server
// sends each row's metadata (the default) or nothing.
func wantsWholeObjects(tableOptions runtime.Object) bool {
	opts, ok := tableOptions.(*metav1.TableOptions)
	return ok && opts.IncludeObject == metav1.IncludeObject
}

// metadataOnly returns the metadata of obj as a PartialObjectMetadata, which is all the server
// puts in a row unless the client asks for whole objects.
func metadataOnly(obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %T: %w", obj, err)
	}
	return meta.AsPartialObjectMetadata(m), nil
}

// runRow renders a run: NAME, TARGET, OP, ATTEMPT, RETRY, PHASE, AGE, DURATION, NEXT-RETRY,
// and RETENTION and ERROR with -o wide.
func runRow(obj runtime.Object, now time.Time) ([]any, bool) {
	r, ok := obj.(*runs.Run)
	if !ok {
		return nil, false
	}
	durationCell := none
	if d := r.Status.Duration; d != nil {
		durationCell = duration.HumanDuration(d.Duration)
	}
	nextRetry := none
	if b := r.Status.Backoff; b != nil && b.RetryAfter.Time.After(now) {
		nextRetry = duration.HumanDuration(b.RetryAfter.Sub(now))
	}
	errCell := none
	if e := r.Status.Error; e != nil {
		errCell = strings.Trim(e.Kind+"/"+e.Step, "/")
	}
	return []any{
		r.Name,
		targetCell(r.Spec.Target),
		orNone(r.Spec.Operation),
		int64(r.Spec.Attempt),
		int64(r.Status.RetryNumber),
		orNone(string(r.Status.Phase)),
		age(r.CreationTimestamp, now),
		durationCell,
		nextRetry,
		orNone(string(r.Status.Retention)),
		errCell,
	}, true
}

// planRow renders a plan: NAME, TARGET, SOURCE, PHASE, ADD, CHANGE, DESTROY, APPROVED-BY, AGE,
// and APPROVAL-HASH and DESTRUCTIVE with -o wide.
func planRow(obj runtime.Object, now time.Time) ([]any, bool) {
	p, ok := obj.(*runs.Plan)
	if !ok {
		return nil, false
	}
	return []any{
		p.Name,
		targetCell(p.Spec.Target),
		orNone(string(p.Spec.Source)),
		orNone(string(p.Status.Phase)),
		int64(p.Status.Add),
		int64(p.Status.Change),
		int64(p.Status.Destroy),
		orNone(p.Status.ApprovedBy),
		age(p.CreationTimestamp, now),
		orNone(p.Status.ApprovalHash),
		p.Status.Destructive,
	}, true
}

func targetCell(t runs.Target) string {
	if t.Kind == "" && t.Name == "" {
		return none
	}
	return t.Kind + "/" + t.Name
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func age(created metav1.Time, now time.Time) string {
	if created.IsZero() {
		return none
	}
	return duration.HumanDuration(now.Sub(created.Time))
}
