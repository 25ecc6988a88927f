module github.com/sturdyhttp/sturdy/fleet

go 1.26.0

require (
	github.com/redis/rueidis v1.0.79
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/sturdyhttp/sturdy v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.16.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/sturdyhttp/sturdy => ..
