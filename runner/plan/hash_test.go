package plan

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/captf/captf/jobs"
)

var (
	keyA = []byte(strings.Repeat("a", 32))
	keyB = []byte(strings.Repeat("b", 32))
)

// doc builds a plan document from resource change and output change JSON fragments.
func doc(resourceChanges []string, outputChanges ...string) string {
	return fmt.Sprintf(`{"format_version":"1.2","resource_changes":[%s],"output_changes":{%s}}`,
		strings.Join(resourceChanges, ","), strings.Join(outputChanges, ","))
}

// rc is a managed resource change of terraform_data.this with the given change body.
func rc(change string) string { return rcAt("terraform_data.this", change) }

func rcAt(address, change string) string {
	return fmt.Sprintf(`{"address":%q,"mode":"managed","type":"terraform_data","name":"this","change":%s}`, address, change)
}

// moved is a no-op change of terraform_data.this that was moved from previous.
func moved(previous string) string {
	return fmt.Sprintf(`{"address":"terraform_data.this","previous_address":%q,"mode":"managed","type":"terraform_data","name":"this","change":{"actions":["no-op"],"before":{"n":"a"},"after":{"n":"a"}}}`, previous)
}

func mustHash(t *testing.T, plan string, key []byte) string {
	t.Helper()
	p, err := Parse([]byte(plan))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, plan)
	}
	h, err := Hash(p, key)
	if err != nil {
		t.Fatalf("hash: %v", err)
	}
	return h
}

// deleteChange deletes terraform_data.this; a delete binds only its address and actions, so its
// effect is always {}.
const deleteChange = `{"actions":["delete"],"before":{"n":"a"},"after":null}`

// macHex is the hex HMAC-SHA256 of an effect, as a hash line carries it.
func macHex(key []byte, effect string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(effect))
	return hex.EncodeToString(h.Sum(nil))
}

const update = `{"actions":["update"],"before":{"id":"1","name":"a","extra":"x"},"after":{"id":"1","name":"b","extra":"x"},"after_unknown":{},"before_sensitive":{},"after_sensitive":{}}`

func TestHashRules(t *testing.T) {
	tests := []struct {
		name      string
		a, b      string
		keyB      []byte
		wantEqual bool
	}{
		{
			name:      "the same plan hashes the same",
			a:         doc([]string{rc(update)}),
			b:         doc([]string{rc(update)}),
			wantEqual: true,
		},
		{
			name:      "the order of changes does not matter",
			a:         doc([]string{rcAt("terraform_data.a", update), rcAt("terraform_data.b", update)}),
			b:         doc([]string{rcAt("terraform_data.b", update), rcAt("terraform_data.a", update)}),
			wantEqual: true,
		},
		{
			name: "the key changes the hash",
			a:    doc([]string{rc(update)}),
			b:    doc([]string{rc(update)}),
			keyB: keyB,
		},
		{
			name: "the address binds",
			a:    doc([]string{rcAt("terraform_data.a", update)}),
			b:    doc([]string{rcAt("terraform_data.b", update)}),
		},
		{
			name: "a newline in an address cannot pass for the start of another line",
			a: doc([]string{
				rcAt(`terraform_data.this["a"]`, deleteChange),
				rcAt(`terraform_data.this["b"]`, deleteChange),
			}),
			b: doc([]string{rcAt(`terraform_data.this["a"]|delete|`+macHex(keyA, `{}`)+"\n"+`terraform_data.this["b"]`, deleteChange)}),
		},
		{
			name: "a | in an address cannot pass for the end of the address",
			a:    doc([]string{rcAt(`terraform_data.this["k|delete"]`, `{"actions":["delete"],"before":{"n":"a"},"after":null}`)}),
			b:    doc([]string{rcAt(`terraform_data.this["k`, `{"actions":["delete\"]|delete"],"before":{"n":"a"},"after":null}`)}),
		},
		{
			name: "a resource at address output.o cannot pass for the output o",
			a:    doc([]string{rcAt("output.o", `{"actions":["create"],"before":null,"after":"v"}`)}),
			b:    doc(nil, `"o":{"actions":["create"],"before":null,"after":"v"}`),
		},
		{
			name: "a comma in an action cannot pass for two actions",
			a:    doc([]string{rc(`{"actions":["delete","create"],"before":{"n":"a"},"after":{"n":"a"}}`)}),
			b:    doc([]string{rc(`{"actions":["delete,create"],"before":{"n":"a"},"after":{"n":"a"}}`)}),
		},
		{
			name: "a changed value changes the hash",
			a:    doc([]string{rc(update)}),
			b:    doc([]string{rc(strings.Replace(update, `"name":"b"`, `"name":"c"`, 1))}),
		},
		{
			name: "the before value of a changed leaf binds",
			a:    doc([]string{rc(update)}),
			b:    doc([]string{rc(strings.Replace(update, `"name":"a"`, `"name":"z"`, 1))}),
		},
		{
			name:      "untouched attributes are excluded",
			a:         doc([]string{rc(update)}),
			b:         doc([]string{rc(strings.ReplaceAll(update, `"extra":"x"`, `"extra":"y"`))}),
			wantEqual: true,
		},
		{
			name:      "unknown after apply binds the path, not the old value",
			a:         doc([]string{rc(`{"actions":["update"],"before":{"n":"a","out":"old1"},"after":{"n":"b"},"after_unknown":{"out":true}}`)}),
			b:         doc([]string{rc(`{"actions":["update"],"before":{"n":"a","out":"old2"},"after":{"n":"b"},"after_unknown":{"out":true}}`)}),
			wantEqual: true,
		},
		{
			name: "unknown after apply differs from a known value",
			a:    doc([]string{rc(`{"actions":["update"],"before":{"n":"a","out":"o"},"after":{"n":"b"},"after_unknown":{"out":true}}`)}),
			b:    doc([]string{rc(`{"actions":["update"],"before":{"n":"a","out":"o"},"after":{"n":"b","out":"p"},"after_unknown":{}}`)}),
		},
		{
			name: "a sensitivity change binds",
			a:    doc([]string{rc(`{"actions":["update"],"before":{"n":"a","s":"x"},"after":{"n":"b","s":"x"},"before_sensitive":{},"after_sensitive":{}}`)}),
			b:    doc([]string{rc(`{"actions":["update"],"before":{"n":"a","s":"x"},"after":{"n":"b","s":"x"},"before_sensitive":{},"after_sensitive":{"s":true}}`)}),
		},
		{
			name: "null and absent differ",
			a:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"m":{"k":null}}}`)}),
			b:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"m":{}}}`)}),
		},
		{
			name: "a list index and a map key differ",
			a:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"v":["x"]}}`)}),
			b:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"v":{"0":"x"}}}`)}),
		},
		{
			name: "numbers keep their literal text",
			// The two numbers are the same float64; as text they differ.
			a: doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":12345678901234567890}}`)}),
			b: doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":12345678901234567891}}`)}),
		},
		{
			name: "a create binds the whole planned object",
			a:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":"a","extra":"x"},"after_unknown":{"id":true}}`)}),
			b:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":"a","extra":"y"},"after_unknown":{"id":true}}`)}),
		},
		{
			name: "a create binds its unknown markers",
			a:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":"a"},"after_unknown":{"id":true}}`)}),
			b:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":"a"},"after_unknown":{"uid":true}}`)}),
		},
		{
			name: "a create binds its sensitive markers",
			a:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":"a"},"after_sensitive":{}}`)}),
			b:    doc([]string{rc(`{"actions":["create"],"before":null,"after":{"n":"a"},"after_sensitive":{"n":true}}`)}),
		},
		{
			name:      "a delete binds nothing beyond address and action",
			a:         doc([]string{rc(`{"actions":["delete"],"before":{"n":"a"},"after":null}`)}),
			b:         doc([]string{rc(`{"actions":["delete"],"before":{"n":"b"},"after":null}`)}),
			wantEqual: true,
		},
		{
			name: "a delete differs from a forget",
			a:    doc([]string{rc(`{"actions":["delete"],"before":{"n":"a"},"after":null}`)}),
			b:    doc([]string{rc(`{"actions":["forget"],"before":{"n":"a"},"after":null}`)}),
		},
		{
			name: "the order of actions binds",
			a:    doc([]string{rc(`{"actions":["delete","create"],"before":{"n":"a"},"after":{"n":"b"}}`)}),
			b:    doc([]string{rc(`{"actions":["create","delete"],"before":{"n":"a"},"after":{"n":"b"}}`)}),
		},
		{
			name: "a replace binds its changed leaves",
			a:    doc([]string{rc(`{"actions":["delete","create"],"before":{"n":"a"},"after":{"n":"b"}}`)}),
			b:    doc([]string{rc(`{"actions":["delete","create"],"before":{"n":"a"},"after":{"n":"c"}}`)}),
		},
		{
			name: "the import ID binds",
			a:    doc([]string{rc(`{"actions":["no-op"],"before":{"n":"a"},"after":{"n":"a"},"importing":{"id":"i-1"}}`)}),
			b:    doc([]string{rc(`{"actions":["no-op"],"before":{"n":"a"},"after":{"n":"a"},"importing":{"id":"i-2"}}`)}),
		},
		{
			name: "an import is a change even as a no-op",
			a:    doc([]string{rc(`{"actions":["no-op"],"before":{"n":"a"},"after":{"n":"a"},"importing":{"id":"i-1"}}`)}),
			b:    doc(nil),
		},
		{
			name: "the moved-from address binds",
			a:    doc([]string{moved("terraform_data.old1")}),
			b:    doc([]string{moved("terraform_data.old2")}),
		},
		{
			name: "a move is a change even as a no-op",
			a:    doc([]string{moved("terraform_data.old1")}),
			b:    doc(nil),
		},
		{
			name: "output changes bind",
			a:    doc(nil, `"o":{"actions":["update"],"before":"x","after":"y"}`),
			b:    doc(nil, `"o":{"actions":["update"],"before":"x","after":"z"}`),
		},
		{
			name:      "no-op changes add nothing",
			a:         doc([]string{rc(`{"actions":["no-op"],"before":{"n":"a"},"after":{"n":"a"}}`)}, `"o":{"actions":["no-op"],"before":"x","after":"x"}`),
			b:         doc(nil),
			wantEqual: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := keyA
			if tt.keyB != nil {
				kb = tt.keyB
			}
			ha, hb := mustHash(t, tt.a, keyA), mustHash(t, tt.b, kb)
			if !strings.HasPrefix(ha, HashPrefix) || len(ha) != len(HashPrefix)+64 {
				t.Fatalf("hash %q is not p3: and 64 hex digits", ha)
			}
			if (ha == hb) != tt.wantEqual {
				t.Errorf("equal = %v, want %v\n a: %s\n b: %s", ha == hb, tt.wantEqual, ha, hb)
			}
		})
	}
}

func TestHashOfEmptyPlan(t *testing.T) {
	p, err := Parse([]byte(doc(nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]byte{keyA, keyB} {
		if got, err := Hash(p, key); err != nil || got != jobs.EmptyPlanHash {
			t.Errorf("Hash = %s, %v; want jobs.EmptyPlanHash whatever the key", got, err)
		}
	}
}

func TestHashRefusesShortKey(t *testing.T) {
	p, err := Parse([]byte(doc(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Hash(p, keyA[:31]); !errors.Is(err, ErrShortKey) {
		t.Errorf("Hash with a 31-byte key: err = %v, want ErrShortKey", err)
	}
}

// TestHashFormat pins the exact text that is hashed: a change of the canonical form would
// invalidate every approved plan, so it must not pass unnoticed.
func TestHashFormat(t *testing.T) {
	plan := doc(
		[]string{rc(`{"actions":["update"],"before":{"id":"1","n":"a","l":[1]},"after":{"id":"1","n":"b","l":[1,2.50]},"after_unknown":{"out":true},"after_sensitive":{"n":true}}`)},
		`"o":{"actions":["create"],"before":null,"after":"v"}`,
	)
	mac := func(effect string) string { return macHex(keyA, effect) }
	want := []string{
		`["output","output.o",["create"],"` + mac(`{"leaves":[{"after":"v","path":[]}]}`) + `"]`,
		`["resource","terraform_data.this",["update"],"` + mac(`{"leaves":[{"after":2.50,"path":["l",1]},{"after":"b","after_sensitive":true,"before":"a","path":["n"]},{"path":["out"],"unknown":true}]}`) + `"]`,
	}
	p, err := Parse([]byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Lines(p, keyA)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Lines:\n got %q\nwant %q", got, want)
	}
	sum := sha256.Sum256([]byte(strings.Join(want, "\n")))
	if h := mustHash(t, plan, keyA); h != HashPrefix+hex.EncodeToString(sum[:]) {
		t.Errorf("Hash = %s, want p3: + SHA-256 of the joined lines", h)
	}
}
