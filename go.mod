module github.com/gocrew/crew

go 1.26
