module github.com/sturdyhttp/sturdy

go 1.26.0

require (
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/sony/gobreaker/v2 v2.4.0
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.16.0
)
