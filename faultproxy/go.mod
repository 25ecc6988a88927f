module github.com/sturdyhttp/sturdy/faultproxy

go 1.26.0

require (
	github.com/Shopify/toxiproxy/v2 v2.5.0
	github.com/sturdyhttp/sturdy v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/sturdyhttp/sturdy => ..
