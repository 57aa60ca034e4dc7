module github.com/pipelined/pipelined

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	golang.org/x/net v0.62.0
)

require golang.org/x/text v0.43.0 // indirect
