module github.com/fenced/fenced/fence

go 1.26.8
