// Package aws shows sturdy under the AWS SDK for Go v2
// (github.com/aws/aws-sdk-go-v2): the SDK's retryer switched off, sturdy's
// stack underneath, and a classifier that knows AWS throttling errors,
// which most AWS services send as 400 with an error code in the body.
package aws

import (
	"context"
	"net/http"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/sturdyhttp/sturdy/transport"
)

// LoadConfig loads the AWS configuration as config.LoadDefaultConfig
// does, then puts sturdy under every service client made from it: its
// HTTPClient becomes [Transport](o) and its retryer aws.NopRetryer, so
// that a throttled call is attempted o.Retry.MaxAttempts times in all,
// not that many times the SDK's attempts. optFns (region, credentials,
// ...) are applied as given; a retryer among them is replaced.
//
// When o.Base is nil, sturdy sends through the transport the SDK would
// have used (its pooled transport, with the custom CA bundle of
// AWS_CA_BUNDLE or config.WithCustomCABundle, or the Transport of an
// *http.Client given with config.WithHTTPClient). That is why the
// client is set after loading: config.WithHTTPClient with a client the
// SDK cannot reconfigure fails to load when a CA bundle is set.
func LoadConfig(ctx context.Context, o transport.Options, optFns ...func(*config.LoadOptions) error) (awssdk.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, optFns...)
	if err != nil {
		return cfg, err
	}
	if o.Base == nil {
		switch c := cfg.HTTPClient.(type) {
		case *awshttp.BuildableClient:
			o.Base = c.GetTransport()
		case *http.Client:
			o.Base = c.Transport
		}
	}
	cfg.HTTPClient = &http.Client{Transport: Transport(o)}
	cfg.Retryer = func() awssdk.Retryer { return awssdk.NopRetryer{} }
	return cfg, nil
}

// Transport returns sturdy's recommended stack ([transport.New]) fitted to
// AWS:
//
//   - [ErrorCodes] under it copies each error's code into the
//     X-Amzn-ErrorType header, and [Classify] retries the throttling
//     codes whatever the status (DynamoDB's
//     ProvisionedThroughputExceededException and most throttling come as
//     400), and leaves the rest to [policy.DefaultClassifier]; an error
//     body that stalls while ErrorCodes reads it is cut after
//     o.IdleTimeout, as the stack cuts any body;
//   - the IdempotencyKey layer is off: AWS does not deduplicate by an
//     Idempotency-Key header (operations that can take a token, like
//     DynamoDB's TransactWriteItems ClientRequestToken, take it in the
//     body), so a POST sturdy cannot prove harmless is not retried.
//
// Throttling is retried for every operation, POST included, because a
// throttled request was refused before it was acted on. An o.Retry.Classify
// already set is kept.
func Transport(o transport.Options) http.RoundTripper {
	o.Disable |= transport.LayerIdempotencyKey
	if o.Retry.Classify == nil {
		o.Retry.Classify = Classify
	}
	idle := o.IdleTimeout // the stack's, for the error bodies ErrorCodes reads beneath it
	switch {
	case o.Disable&transport.LayerIdleTimeout != 0:
		idle = 0
	case idle == 0:
		idle = transport.DefaultIdleTimeout
	}
	o.Base = errorCodesIdle(o.Base, idle)
	return transport.New(o)
}
