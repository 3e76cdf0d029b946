package jobs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestViewAnnotations_ListEveryAnnotationTheRunModelReads checks ViewAnnotations against the
// source of this package: the functions that take a Job, and everything they call, read exactly
// the annotations it lists. A record that keeps only those (the API server's) then gives the
// same views as the Job. Adding a read of another annotation to a view fails here until the
// annotation is listed; so does reading annotations in a way the check cannot follow (a key in a
// variable, the map handed to a library function or ranged over), which keeps the check whole.
func TestViewAnnotations_ListEveryAnnotationTheRunModelReads(t *testing.T) {
	src := parseModel(t, nil)
	reads := src.annotationReads()
	for _, p := range reads.problems {
		t.Errorf("%s", p)
	}
	listed := ViewAnnotations()
	for _, key := range slices.Sorted(maps.Keys(reads.keys)) {
		if !slices.Contains(listed, key) {
			t.Errorf("%s reads the Job annotation %s, which ViewAnnotations does not list: a record of the Job would drop it", reads.keys[key][0], key)
		}
	}
	for _, key := range listed {
		if _, ok := reads.keys[key]; !ok {
			t.Errorf("ViewAnnotations lists %s, which no function that takes a Job reads", key)
		}
	}
	if len(listed) != len(uniq(listed)) {
		t.Errorf("ViewAnnotations lists an annotation twice: %v", listed)
	}
}

// TestViewAnnotations_TheCheckFindsEveryWayOfReading plants a view into the package's source
// and checks that the check above sees it read its annotation, or refuses it.
func TestViewAnnotations_TheCheckFindsEveryWayOfReading(t *testing.T) {
	const planted = "captf.io/restore-serial" // AnnotationRestoreSerial: not one the views read
	tests := []struct {
		name        string
		source      string
		wantRead    string // the key the check must find read once the view is planted
		wantProblem bool   // the check must refuse the planted read
	}{
		{
			name:     "an index of job.Annotations is a read",
			source:   `func PlantedView(job *batchv1.Job) string { return job.Annotations[AnnotationRestoreSerial] }`,
			wantRead: planted,
		},
		{
			name:     "a mark read through hasMark is a read",
			source:   `func PlantedView(job batchv1.Job) bool { return hasMark(job.Annotations, AnnotationRestoreSerial) }`,
			wantRead: planted,
		},
		{
			name: "a read in a helper that a view calls is a read",
			source: `func PlantedView(all []batchv1.Job) string { return plantedHelper(&all[0]) }
func plantedHelper(j *batchv1.Job) string { return j.ObjectMeta.Annotations[AnnotationRestoreSerial] }`,
			wantRead: planted,
		},
		{
			name:     "a read through GetAnnotations is a read",
			source:   `func PlantedView(job *batchv1.Job) string { return job.GetAnnotations()[AnnotationRestoreSerial] }`,
			wantRead: planted,
		},
		{
			name:     "a literal key is a read",
			source:   `func PlantedView(job *batchv1.Job) string { return job.Annotations["captf.io/planted"] }`,
			wantRead: "captf.io/planted",
		},
		{
			name:     "a key handed to a library function is a read",
			source:   `func PlantedView(job *batchv1.Job) bool { return metav1.HasAnnotation(job.ObjectMeta, AnnotationRestoreSerial) }`,
			wantRead: planted,
		},
		{
			name:     "a read in a method of History is a read",
			source:   `func (h *History) PlantedView(i int) string { return h.jobs[i].Annotations[AnnotationRestoreSerial] }`,
			wantRead: planted,
		},
		{
			name: "a read in a function a view passes as a value is a read",
			source: `func PlantedView(all []batchv1.Job) []string { return plantedMap(all, plantedHelper) }
func plantedMap(all []batchv1.Job, f func(*batchv1.Job) string) []string { return nil }
func plantedHelper(j *batchv1.Job) string { return j.Annotations[AnnotationRestoreSerial] }`,
			wantRead: planted,
		},
		{
			name:        "a key in a variable is refused",
			source:      `func PlantedView(job *batchv1.Job) string { k := AnnotationRestoreSerial; return job.Annotations[k] }`,
			wantProblem: true,
		},
		{
			name:        "the annotations handed to a library function are refused",
			source:      `func PlantedView(job *batchv1.Job) map[string]string { return maps.Clone(job.Annotations) }`,
			wantProblem: true,
		},
		{
			name:        "the annotations ranged over are refused",
			source:      `func PlantedView(job *batchv1.Job) (n int) { for range job.Annotations { n++ }; return n }`,
			wantProblem: true,
		},
		{
			name:   "writing an annotation key into a map literal is no read",
			source: `func PlantedView(job *batchv1.Job) map[string]string { return map[string]string{AnnotationRestoreSerial: job.Name} }`,
		},
		{
			name:   "a function that takes no Job is no view",
			source: `func PlantedOther(annotations map[string]string) string { return annotations[AnnotationRestoreSerial] }`,
		},
	}
	baseline := parseModel(t, nil).annotationReads()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := "package jobs\n\nimport (\n\t\"maps\"\n\n\tbatchv1 \"k8s.io/api/batch/v1\"\n\tmetav1 \"k8s.io/apimachinery/pkg/apis/meta/v1\"\n)\n\n" + tt.source + "\n"
			reads := parseModel(t, map[string]string{"planted.go": file}).annotationReads()
			var plantedReads []string
			for key := range reads.keys {
				if _, ok := baseline.keys[key]; !ok {
					plantedReads = append(plantedReads, key)
				}
			}
			var plantedProblems []string
			for _, p := range reads.problems {
				if strings.HasPrefix(p, "planted.go:") {
					plantedProblems = append(plantedProblems, p)
				} else {
					t.Errorf("problem outside the planted file: %s", p)
				}
			}
			switch {
			case tt.wantRead != "" && !slices.Contains(plantedReads, tt.wantRead):
				t.Errorf("the check found the planted file reading %v, want %s", plantedReads, tt.wantRead)
			case tt.wantRead == "" && len(plantedReads) > 0:
				t.Errorf("the check found the planted file reading %v, want none", plantedReads)
			}
			if tt.wantProblem != (len(plantedProblems) > 0) {
				t.Errorf("problems %q, want a problem: %v", plantedProblems, tt.wantProblem)
			}
		})
	}
}

// modelSource is the parsed non-test source of this package.
type modelSource struct {
	fset *token.FileSet
	// consts are the string constants by name.
	consts map[string]string
	// funcs are the package-level functions by name; methods the methods, by name.
	funcs   map[string]*ast.FuncDecl
	methods map[string][]*ast.FuncDecl
	// decls are every function and method, in source order.
	decls []*ast.FuncDecl
	// imports are the names the files import packages under.
	imports map[string]bool
}

// parseModel parses the package's non-test files, and extra files by name.
func parseModel(t *testing.T, extra map[string]string) *modelSource {
	t.Helper()
	src := &modelSource{
		fset: token.NewFileSet(), consts: map[string]string{}, funcs: map[string]*ast.FuncDecl{},
		methods: map[string][]*ast.FuncDecl{}, imports: map[string]bool{},
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]any{}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			files[n] = nil
		}
	}
	for n, text := range extra {
		files[n] = text
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f, err := parser.ParseFile(src.fset, name, files[name], parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		src.add(f)
	}
	return src
}

func (src *modelSource) add(f *ast.File) {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		src.imports[name] = true
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.GenDecl:
			if d.Tok != token.CONST {
				continue
			}
			for _, spec := range d.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := stringLit(vs.Values[i]); ok {
							src.consts[name.Name] = v
						}
					}
				}
			}
		case *ast.FuncDecl:
			src.decls = append(src.decls, d)
			if d.Recv == nil {
				src.funcs[d.Name.Name] = d
			} else {
				src.methods[d.Name.Name] = append(src.methods[d.Name.Name], d)
			}
		}
	}
}

// takesJobs reports whether fn is exported and takes a Job, Jobs or a History, as receiver or
// parameter: the run model's entry points for reading Jobs.
func takesJobs(fn *ast.FuncDecl) bool {
	if !fn.Name.IsExported() {
		return false
	}
	var fields []*ast.Field
	if fn.Recv != nil {
		fields = append(fields, fn.Recv.List...)
	}
	fields = append(fields, fn.Type.Params.List...)
	for _, f := range fields {
		if s := types.ExprString(f.Type); strings.Contains(s, "batchv1.Job") || strings.Contains(s, "History") {
			return true
		}
	}
	return false
}

// reads are the annotation keys the run model reads, with where, and the reads the check cannot
// follow.
type reads struct {
	keys     map[string][]token.Position
	problems []string
}

// binding says what the parameters of an analysed function hold: Job annotations, or constant
// keys.
type binding struct {
	maps map[string]bool
	keys map[string][]keyRef
}

// keyRef is a constant key and where the constant is written, so that a read through a helper
// such as hasMark is reported where the view names the key.
type keyRef struct {
	key string
	at  token.Pos
}

func (b binding) String() string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(b.maps)) {
		parts = append(parts, p+"=annotations")
	}
	for _, p := range slices.Sorted(maps.Keys(b.keys)) {
		for _, k := range b.keys[p] {
			parts = append(parts, fmt.Sprintf("%s=%s@%d", p, k.key, k.at))
		}
	}
	return strings.Join(parts, ",")
}

// annotationKeyShape is how a literal annotation key looks.
var annotationKeyShape = regexp.MustCompile(`^[a-z0-9.-]+/[A-Za-z0-9._-]+$`)

// annotationReads follows every function that takes Jobs through the functions it calls,
// recording the keys it indexes Job annotations with.
func (src *modelSource) annotationReads() reads {
	a := &analysis{src: src, out: reads{keys: map[string][]token.Position{}}, seen: map[string]bool{}}
	for _, fn := range src.decls {
		if takesJobs(fn) {
			a.analyze(fn, binding{})
		}
	}
	sort.Strings(a.out.problems)
	a.out.problems = slices.Compact(a.out.problems)
	return a.out
}

type analysis struct {
	src  *modelSource
	out  reads
	seen map[string]bool
}

func (a *analysis) analyze(fn *ast.FuncDecl, b binding) {
	id := fmt.Sprintf("%p %s", fn, b)
	if a.seen[id] || fn.Body == nil {
		return
	}
	a.seen[id] = true
	var stack []ast.Node
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		var parent ast.Node
		if len(stack) > 0 {
			parent = stack[len(stack)-1]
		}
		stack = append(stack, n)
		switch n := n.(type) {
		case *ast.CallExpr:
			a.call(n, b)
		case *ast.Ident:
			// A function used as a value runs somewhere: follow it.
			if f, ok := a.src.funcs[n.Name]; ok && !isCalled(parent, n) && !isField(parent, n) {
				a.analyze(f, binding{})
			}
		case *ast.SelectorExpr:
			if !isCalled(parent, n) {
				for _, m := range a.src.methods[n.Sel.Name] {
					a.analyze(m, binding{})
				}
			}
		}
		if e, ok := n.(ast.Expr); ok && a.isAnnotations(e, b) {
			a.use(e, parent, b)
		}
		return true
	})
}

// isCalled reports whether e is the function of the call parent.
func isCalled(parent ast.Node, e ast.Expr) bool {
	switch p := parent.(type) {
	case *ast.CallExpr:
		return p.Fun == e
	case *ast.IndexExpr: // an instantiation, f[T](...)
		return p.X == e
	}
	return false
}

// isField reports whether id names a field or method of something else, or a key of a literal.
func isField(parent ast.Node, id *ast.Ident) bool {
	switch p := parent.(type) {
	case *ast.SelectorExpr:
		return p.Sel == id
	case *ast.KeyValueExpr:
		return p.Key == id
	}
	return false
}

// isAnnotations reports whether e is the annotations of a Job.
func (a *analysis) isAnnotations(e ast.Expr, b binding) bool {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name == "Annotations"
	case *ast.CallExpr:
		s, ok := e.Fun.(*ast.SelectorExpr)
		return ok && s.Sel.Name == "GetAnnotations"
	case *ast.Ident:
		return b.maps[e.Name]
	}
	return false
}

// keysOf resolves a key expression to the constant keys it can hold.
func (a *analysis) keysOf(e ast.Expr, b binding) ([]keyRef, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		v, ok := stringLit(e)
		return []keyRef{{v, e.Pos()}}, ok
	case *ast.Ident:
		if v, ok := a.src.consts[e.Name]; ok {
			return []keyRef{{v, e.Pos()}}, true
		}
		keys, ok := b.keys[e.Name]
		return keys, ok
	case *ast.ParenExpr:
		return a.keysOf(e.X, b)
	}
	return nil, false
}

// use records how the annotations e are used: indexed by a key the check can resolve, or passed
// to a function of the package, which call follows; anything else is a problem.
func (a *analysis) use(e ast.Expr, parent ast.Node, b binding) {
	pos := a.src.fset.Position(e.Pos())
	switch p := parent.(type) {
	case *ast.IndexExpr:
		if p.X == e {
			if keys, ok := a.keysOf(p.Index, b); ok {
				for _, k := range keys {
					a.read(k)
				}
				return
			}
			a.problem(pos, "indexes Job annotations with %s, which is no constant: read them by a constant key", types.ExprString(p.Index))
			return
		}
	case *ast.CallExpr:
		if slices.Contains(p.Args, e) && len(a.callees(p)) > 0 {
			return // followed by call
		}
		a.problem(pos, "passes Job annotations to %s, which this check cannot follow", types.ExprString(p.Fun))
		return
	}
	a.problem(pos, "uses Job annotations other than by a constant key: %s", types.ExprString(e))
}

// read records a read of k.
func (a *analysis) read(k keyRef) {
	a.out.keys[k.key] = append(a.out.keys[k.key], a.src.fset.Position(k.at))
}

func (a *analysis) problem(pos token.Position, format string, args ...any) {
	a.out.problems = append(a.out.problems, pos.String()+": "+fmt.Sprintf(format, args...))
}

// callees returns the functions of the package a call may run: the function it names, or every
// method of the name; none for a library function, a builtin or a conversion.
func (a *analysis) callees(call *ast.CallExpr) []*ast.FuncDecl {
	fun := call.Fun
	if ix, ok := fun.(*ast.IndexExpr); ok {
		fun = ix.X
	}
	switch f := fun.(type) {
	case *ast.Ident:
		if fn, ok := a.src.funcs[f.Name]; ok {
			return []*ast.FuncDecl{fn}
		}
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok && a.src.imports[x.Name] {
			return nil
		}
		return a.src.methods[f.Sel.Name]
	}
	return nil
}

// call follows a call into the functions of the package it may run, with what its arguments
// hold; a constant annotation key handed to any other function counts as read.
func (a *analysis) call(call *ast.CallExpr, b binding) {
	callees := a.callees(call)
	if len(callees) == 0 {
		for _, arg := range call.Args {
			if keys, ok := a.keysOf(arg, b); ok {
				for _, k := range keys {
					if a.isAnnotationKey(k.key) {
						a.read(k)
					}
				}
			}
		}
		return
	}
	for _, fn := range callees {
		var params []string
		for _, f := range fn.Type.Params.List {
			if len(f.Names) == 0 {
				params = append(params, "_")
			}
			for _, n := range f.Names {
				params = append(params, n.Name)
			}
		}
		inner := binding{maps: map[string]bool{}, keys: map[string][]keyRef{}}
		for i, arg := range call.Args {
			if len(params) == 0 {
				break
			}
			p := params[min(i, len(params)-1)]
			if a.isAnnotations(arg, b) {
				inner.maps[p] = true
			} else if keys, ok := a.keysOf(arg, b); ok {
				inner.keys[p] = append(inner.keys[p], keys...)
			}
		}
		a.analyze(fn, inner)
	}
}

// isAnnotationKey reports whether k is the value of an Annotation constant or looks like a key.
func (a *analysis) isAnnotationKey(k string) bool {
	for name, v := range a.src.consts {
		if strings.HasPrefix(name, "Annotation") && v == k {
			return true
		}
	}
	return annotationKeyShape.MatchString(k)
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

func uniq(s []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(s)))
}
