module github.com/sturdyhttp/sturdy/bench

go 1.26.0

require (
	github.com/cristalhq/hedgedhttp v0.9.1
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/go-resty/resty/v2 v2.17.2
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/sturdyhttp/sturdy v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	golang.org/x/net v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/sturdyhttp/sturdy => ..
