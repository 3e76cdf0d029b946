package workspace

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryRecordedReasonIsDocumented reads this package's source: every reason passed to
// p.event or put in an event{} must be a constant listed in Events, so the generated reference
// cannot drift from what the controller records.
func TestEveryRecordedReasonIsDocumented(t *testing.T) {
	documented := map[string]bool{}
	for _, e := range Events {
		documented[e.Reason] = true
	}
	constants := map[string]string{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		for _, decl := range f.Decls {
			if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
				for _, spec := range gen.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i >= len(vs.Values) {
							break // iota constants carry no literal
						}
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Event") {
							constants[n.Name] = strings.Trim(lit.Value, `"`)
						}
					}
				}
			}
		}
	}
	check := func(pos token.Pos, reason ast.Expr) {
		if id, ok := reason.(*ast.Ident); !ok || !documented[constants[id.Name]] {
			t.Errorf("%s: event reason %s is not a documented Event constant", fset.Position(pos), exprText(reason))
		}
	}
	for _, f := range parsed {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "event" && len(x.Args) >= 3 {
					if id, ok := x.Args[2].(*ast.SelectorExpr); ok && id.Sel.Name == "reason" {
						return true // the stored reason of an event{} checked below
					}
					check(x.Pos(), x.Args[2])
				}
			case *ast.CompositeLit:
				if id, ok := x.Type.(*ast.Ident); ok && id.Name == "event" && len(x.Elts) >= 2 {
					check(x.Pos(), x.Elts[1])
				}
			}
			return true
		})
	}
	if len(constants) != len(Events) {
		t.Errorf("%d Event constants, %d documented", len(constants), len(Events))
	}
}

func exprText(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Value
	case *ast.Ident:
		return x.Name
	}
	return "an expression"
}
