package aws

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

func TestPutItemThroughThrottling(t *testing.T) {
	// No shared config or credentials from the machine running the test.
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CA_BUNDLE", "")

	step := func(f http.HandlerFunc) httptestutil.Step { return httptestutil.Handler(f) }
	tests := []struct {
		name         string
		steps        func(ok httptestutil.Step) []httptestutil.Step
		wantRequests int
		// wantCode is the AWS error code the SDK returns; "" means success.
		wantCode string
	}{{
		name: "ProvisionedThroughputExceededException (400), then success",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{step(throughputExceeded), ok.Forever()}
		},
		wantRequests: 2,
	}, {
		name: "ThrottlingException twice, then success",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{step(throttling).Times(2), ok.Forever()}
		},
		wantRequests: 3,
	}, {
		name: "ValidationException is not retried",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{step(validation), ok.Forever()}
		},
		wantRequests: 1, wantCode: "ValidationException",
	}, {
		name: "throttled on every attempt: 4 attempts, the SDK adds none",
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{step(throughputExceeded).Forever()}
		},
		wantRequests: 4, wantCode: "ProvisionedThroughputExceededException",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := &dynamoDB{}
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps(httptestutil.Handler(emu))...))
				n := httptestutil.NewNetwork()
				srv := n.Serve("dynamodb.us-east-1.test", rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				var retries []policy.RetryEvent
				cfg, err := LoadConfig(context.Background(),
					transport.Options{Base: base, Hooks: transport.Hooks{OnRetry: func(e policy.RetryEvent) { retries = append(retries, e) }}},
					config.WithRegion("us-east-1"),
					config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDEMULATOR", "secret", "")),
					config.WithBaseEndpoint(srv.URL),
				)
				if err != nil {
					t.Fatal(err)
				}
				db := dynamodb.NewFromConfig(cfg)
				_, err = db.PutItem(context.Background(), &dynamodb.PutItemInput{
					TableName: awssdk.String("orders"),
					Item: map[string]types.AttributeValue{
						"id":    &types.AttributeValueMemberS{Value: "order-42"},
						"total": &types.AttributeValueMemberN{Value: "2000"},
					},
				})

				if got := rec.Count(); got != tt.wantRequests {
					t.Errorf("emulator got %d requests, want %d", got, tt.wantRequests)
				}
				if got, want := len(retries), tt.wantRequests-1; got != want {
					t.Errorf("sturdy made %d retries, want %d", got, want)
				}
				for i, e := range retries {
					if !strings.HasPrefix(e.Reason, "aws throttling ") {
						t.Errorf("retry %d: reason %q, want \"aws throttling ...\"", i+1, e.Reason)
					}
				}
				for i, r := range rec.Requests() {
					if k := r.Header.Get("Idempotency-Key"); k != "" {
						t.Errorf("request %d: Idempotency-Key %q, want none (AWS ignores it)", i+1, k)
					}
				}
				if tt.wantCode == "" {
					if err != nil {
						t.Fatalf("got error %v, want none", err)
					}
					if got := emu.Stored(); got != 1 {
						t.Errorf("emulator stored %d items, want 1", got)
					}
					return
				}
				var apiErr smithy.APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("got error %v, want an AWS API error %s", err, tt.wantCode)
				}
				if got := apiErr.ErrorCode(); got != tt.wantCode {
					t.Errorf("got error code %q, want %q", got, tt.wantCode)
				}
				if got := emu.Stored(); got != 0 {
					t.Errorf("emulator stored %d items, want 0", got)
				}
			})
		})
	}
}

// LoadConfig keeps the SDK's transport as sturdy's base: a CA bundle from
// AWS_CA_BUNDLE still decides which servers are trusted. Over real TLS on
// loopback, since this test is about certificates.
func TestLoadConfigKeepsCABundle(t *testing.T) {
	emu := &dynamoDB{}
	srv := httptest.NewTLSServer(httptestutil.Script(httptestutil.Handler(http.HandlerFunc(throttling)), httptestutil.Handler(emu).Forever()))
	defer srv.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(bundle, pemCert, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	for _, tc := range []struct {
		bundle  string
		wantErr bool
	}{
		{bundle: bundle},
		{bundle: "", wantErr: true}, // the emulator's certificate is not trusted
	} {
		t.Setenv("AWS_CA_BUNDLE", tc.bundle)
		cfg, err := LoadConfig(context.Background(),
			transport.Options{Retry: policy.Retry{Backoff: func(int, time.Duration) time.Duration { return time.Millisecond }}},
			config.WithRegion("us-east-1"),
			config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDEMULATOR", "secret", "")),
			config.WithBaseEndpoint(srv.URL),
		)
		if err != nil {
			t.Fatalf("AWS_CA_BUNDLE=%q: LoadConfig: %v", tc.bundle, err)
		}
		_, err = dynamodb.NewFromConfig(cfg).PutItem(context.Background(), &dynamodb.PutItemInput{
			TableName: awssdk.String("orders"),
			Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "order-7"}},
		})
		if gotErr := err != nil; gotErr != tc.wantErr {
			t.Errorf("AWS_CA_BUNDLE=%q: got error %v, want error %v", tc.bundle, err, tc.wantErr)
		}
		cfg.HTTPClient.(*http.Client).CloseIdleConnections()
	}
	if got := emu.Stored(); got != 1 {
		t.Errorf("emulator stored %d items, want 1", got)
	}
}
