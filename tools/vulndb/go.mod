module github.com/sturdyhttp/sturdy/tools/vulndb

go 1.26.0
