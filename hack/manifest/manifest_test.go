package manifest

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
		wantErr    string
	}{
		{"objects in order", "kind: A\nmetadata: {name: a}\n---\nkind: B\nmetadata: {name: b}\n", []string{"A/a", "B/b"}, ""},
		{"a document of comments only is skipped", "# just a note\n---\nkind: A\nmetadata: {name: a}\n", []string{"A/a"}, ""},
		{"empty documents are skipped", "---\n---\nkind: A\nmetadata: {name: a}\n---\n", []string{"A/a"}, ""},
		{"a broken document is named", "kind: A\n---\nkind: [\n", nil, "document 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNumbersDecodeAsIntegers(t *testing.T) {
	objs, err := Decode([]byte("kind: A\nspec: {replicas: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := objs[0].Object["spec"].(map[string]any)["replicas"].(int64); !ok || r != 2 {
		t.Fatalf("replicas = %#v", objs[0].Object["spec"])
	}
}
