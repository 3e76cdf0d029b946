package plan

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/captf/captf/jobs"
)

func change(address, mode string, actions ...string) string {
	return fmt.Sprintf(`{"address":%q,"mode":%q,"change":{"actions":["%s"],"before":null,"after":null}}`, address, mode, strings.Join(actions, `","`))
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name            string
		changes         []string
		wantCounts      jobs.Counts
		wantResources   []jobs.ResourceChange
		wantDestructive bool
	}{
		{
			name:          "a create adds",
			changes:       []string{change("a", "managed", "create")},
			wantCounts:    jobs.Counts{Add: 1},
			wantResources: []jobs.ResourceChange{{Address: "a", Actions: []string{"create"}}},
		},
		{
			name:          "an update changes",
			changes:       []string{change("a", "managed", "update")},
			wantCounts:    jobs.Counts{Change: 1},
			wantResources: []jobs.ResourceChange{{Address: "a", Actions: []string{"update"}}},
		},
		{
			name:            "a delete destroys and is destructive",
			changes:         []string{change("a", "managed", "delete")},
			wantCounts:      jobs.Counts{Destroy: 1},
			wantResources:   []jobs.ResourceChange{{Address: "a", Actions: []string{"delete"}}},
			wantDestructive: true,
		},
		{
			name:            "a replace adds and destroys and is destructive",
			changes:         []string{change("a", "managed", "delete", "create")},
			wantCounts:      jobs.Counts{Add: 1, Destroy: 1},
			wantResources:   []jobs.ResourceChange{{Address: "a", Actions: []string{"delete", "create"}}},
			wantDestructive: true,
		},
		{
			name:            "a create-before-destroy replace is destructive too",
			changes:         []string{change("a", "managed", "create", "delete")},
			wantCounts:      jobs.Counts{Add: 1, Destroy: 1},
			wantResources:   []jobs.ResourceChange{{Address: "a", Actions: []string{"create", "delete"}}},
			wantDestructive: true,
		},
		{
			name:          "a forget is listed but neither counted nor destructive",
			changes:       []string{change("a", "managed", "forget")},
			wantResources: []jobs.ResourceChange{{Address: "a", Actions: []string{"forget"}}},
		},
		{
			name:    "data source reads are not resources",
			changes: []string{change("data.x.y", "data", "read")},
		},
		{
			name:    "no-ops are not listed",
			changes: []string{change("a", "managed", "no-op")},
		},
		{
			name: "destructive changes are listed first, then plan order",
			changes: []string{
				change("c", "managed", "create"),
				change("u", "managed", "update"),
				change("r", "managed", "delete", "create"),
				change("d", "managed", "delete"),
			},
			wantCounts: jobs.Counts{Add: 2, Change: 1, Destroy: 2},
			wantResources: []jobs.ResourceChange{
				{Address: "r", Actions: []string{"delete", "create"}},
				{Address: "d", Actions: []string{"delete"}},
				{Address: "c", Actions: []string{"create"}},
				{Address: "u", Actions: []string{"update"}},
			},
			wantDestructive: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(doc(tt.changes)))
			if err != nil {
				t.Fatal(err)
			}
			s := Summarize(p)
			if s.Counts != tt.wantCounts {
				t.Errorf("Counts = %+v, want %+v", s.Counts, tt.wantCounts)
			}
			if len(s.Resources) != 0 || len(tt.wantResources) != 0 {
				if !reflect.DeepEqual(s.Resources, tt.wantResources) {
					t.Errorf("Resources = %+v, want %+v", s.Resources, tt.wantResources)
				}
			}
			if s.IsDestructive() != tt.wantDestructive {
				t.Errorf("IsDestructive = %v, want %v", s.IsDestructive(), tt.wantDestructive)
			}
		})
	}
}

func TestDestructiveKind(t *testing.T) {
	tests := []struct {
		actions []string
		want    string
	}{
		{[]string{"delete"}, "delete"},
		{[]string{"delete", "create"}, "replace"},
		{[]string{"create", "delete"}, "replace"},
	}
	for _, tt := range tests {
		if got := DestructiveKind(tt.actions); got != tt.want {
			t.Errorf("DestructiveKind(%v) = %s, want %s", tt.actions, got, tt.want)
		}
	}
}

func TestSensitiveStringsIncludeNumbers(t *testing.T) {
	p, err := Parse([]byte(doc(nil, `"pin":{"actions":["create"],"before":null,"after":987654,"after_sensitive":true}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got := SensitiveStrings(p, 4); !reflect.DeepEqual(got, []string{"987654"}) {
		t.Errorf("SensitiveStrings = %q, want the sensitive number's text", got)
	}
}

func TestSensitiveStrings(t *testing.T) {
	plan := doc(
		[]string{rc(`{"actions":["update"],"before":{"pw":"old-secret","name":"public-name","nested":{"k":"deep-secret"}},"after":{"pw":"new-secret","name":"public-name","nested":{"k":"deep-secret"}},"before_sensitive":{"pw":true,"nested":true},"after_sensitive":{"pw":true,"nested":{"k":true}}}`)},
		`"o":{"actions":["create"],"before":null,"after":{"token":"output-secret","n":"abc"},"after_sensitive":true}`,
	)
	p, err := Parse([]byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	got := SensitiveStrings(p, 4)
	want := []string{"output-secret", "deep-secret", "new-secret", "old-secret"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SensitiveStrings = %q, want %q (longest first, public and short values left out)", got, want)
	}
}
