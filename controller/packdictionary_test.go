package controller

import (
	"encoding/json"
	"fmt"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
)

// TestTheDictionaryFollowsTheObjects: the first object packed is the first dictionary; once
// renewAfter objects used it, an object that packs poorly against it becomes the next one, and
// the objects packed against the old one still unpack.
func TestTheDictionaryFollowsTheObjects(t *testing.T) {
	fresh := func(i int) *infrav1.TerraformCluster {
		return &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%04d", i), Namespace: "ns", ResourceVersion: fmt.Sprint(100 + i)}}
	}
	converged := func(i int) *infrav1.TerraformCluster {
		tc := fresh(i)
		for _, typ := range []string{"Paused", "Ready", "StateReadable", "DependenciesReady", "OutputsValid"} {
			tc.Status.Conditions = append(tc.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ + "Reason",
				Message: "a sentence every converged object has in its " + typ + " condition"})
		}
		return tc
	}
	k := newObjectPacker(&infrav1.TerraformCluster{})
	pack := func(tc *infrav1.TerraformCluster) *PackedObject {
		t.Helper()
		p, err := k.pack(tc)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	size := func(tc *infrav1.TerraformCluster) int { raw, _ := json.Marshal(tc); return len(raw) }

	first := pack(fresh(0))
	var old []*PackedObject
	for i := 1; i < renewAfter-1; i++ {
		old = append(old, pack(fresh(i)))
	}
	poor := pack(converged(1000))
	if poor.dictionary != first.dictionary {
		t.Fatalf("the dictionary was renewed after %d objects, before %d", renewAfter-1, renewAfter)
	}
	if !packsPoorly(poor.Packed(), size(converged(1000))) {
		t.Fatalf("a converged object packs into %d of its %d bytes against a new object's JSON", poor.Packed(), size(converged(1000)))
	}
	renewing := pack(converged(1001))
	if renewing.dictionary == first.dictionary {
		t.Fatalf("an object that packs poorly after %d objects did not renew the dictionary", renewAfter)
	}
	next := pack(converged(1002))
	if next.dictionary != renewing.dictionary || packsPoorly(next.Packed(), size(converged(1002))) {
		t.Errorf("an object like the new dictionary packs into %d of its %d bytes", next.Packed(), size(converged(1002)))
	}
	for i, p := range append(old, first, poor, renewing, next) {
		obj, err := p.Unpack()
		if err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		if obj.GetName() != p.GetName() || obj.GetResourceVersion() != p.GetResourceVersion() {
			t.Errorf("object %d unpacks as %s at %s", i, obj.GetName(), obj.GetResourceVersion())
		}
	}
	if got, err := next.Unpack(); err != nil || !apiequality.Semantic.DeepEqual(got, converged(1002)) {
		t.Errorf("unpacked %+v (%v), want the converged object", got, err)
	}
}

// BenchmarkPackedObject measures what the packed cache costs in CPU: packing an object when its
// event arrives, and unpacking it on each read, against the deep copy a read of an unpacked
// cache makes.
func BenchmarkPackedObject(b *testing.B) {
	converged := func(name string) *infrav1.TerraformCluster {
		tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "12345",
			UID: "d9d70363-0910-478a-99e0-441159c26fe7", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": name}}}
		for _, typ := range []string{"Paused", "Ready", "StateReadable", "DependenciesReady", "OutputsValid"} {
			tc.Status.Conditions = append(tc.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ + "Reason",
				Message: "a sentence every converged object has in its " + typ + " condition"})
		}
		return tc
	}
	k := newObjectPacker(&infrav1.TerraformCluster{})
	if _, err := k.pack(converged("c0000")); err != nil {
		b.Fatal(err)
	}
	obj := converged("c0001")
	b.Run("pack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := k.pack(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	packed, _ := k.pack(obj)
	b.Run("unpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := packed.Unpack(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("deep-copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = obj.DeepCopyObject()
		}
	})
}
