module github.com/pipelined/pipelined/examples

go 1.26.0

replace github.com/pipelined/pipelined => ../

require (
	github.com/go-resty/resty/v2 v2.17.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/pipelined/pipelined v0.0.0-00010101000000-000000000000
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
