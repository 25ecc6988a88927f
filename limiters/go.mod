module github.com/sturdyhttp/sturdy/limiters

go 1.26.0

replace github.com/sturdyhttp/sturdy => ../

require (
	github.com/go-chi/httprate v0.16.1
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/redis/rueidis v1.0.79
	github.com/sturdyhttp/sturdy v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
