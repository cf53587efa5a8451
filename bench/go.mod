module github.com/gocrew/crew/bench

go 1.26.0

require (
	github.com/alitto/pond v1.9.2
	github.com/alitto/pond/v2 v2.7.1
	github.com/gammazero/workerpool v1.3.0
	github.com/go-pkgz/pool v0.9.0
	github.com/gocrew/crew v0.1.0
	github.com/panjf2000/ants/v2 v2.12.1
	github.com/sourcegraph/conc v0.3.0
	golang.org/x/sync v0.24.0
	gonum.org/v1/plot v0.17.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/gammazero/deque v1.2.2 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.9.0 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	golang.org/x/time v0.14.0 // indirect
)

replace github.com/gocrew/crew => ../
