module github.com/fenced/fenced/client

go 1.26.8

require github.com/fenced/fenced/fence v0.0.0

replace github.com/fenced/fenced/fence => ../fence
