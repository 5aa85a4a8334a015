module github.com/fenced/fenced/scripts/zkcmp

go 1.26.0

require github.com/go-zookeeper/zk v1.0.4
