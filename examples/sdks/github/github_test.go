package github

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	gh "github.com/google/go-github/v84/github"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

func TestCallsRespectGitHubRateLimits(t *testing.T) {
	plenty := httptestutil.Quota{Limit: 5000, Remaining: 4999, Reset: time.Hour}
	tests := []struct {
		name string
		// quota is what successful answers report.
		quota httptestutil.Quota
		steps func(ok httptestutil.Step) []httptestutil.Step
		// sdkCheck leaves go-github's own rate-limit check on.
		sdkCheck     bool
		calls        int
		wantRequests int
		// wantErr is what the last call fails with: "" (success),
		// "rate limit" or "forbidden".
		wantErr string
		// The time from the first call to the end of the last is in [minTook, maxTook].
		minTook, maxTook time.Duration
	}{{
		name:  "X-RateLimit-Remaining 0 on a success: the next call waits for X-RateLimit-Reset",
		quota: httptestutil.Quota{Limit: 5000, Remaining: 0, Reset: 2 * time.Second},
		steps: func(ok httptestutil.Step) []httptestutil.Step { return []httptestutil.Step{ok.Forever()} },
		calls: 2, wantRequests: 2,
		minTook: 2 * time.Second, maxTook: 3 * time.Second,
	}, {
		name:     "go-github's own check left on: the next call fails fast instead",
		quota:    httptestutil.Quota{Limit: 5000, Remaining: 0, Reset: 2 * time.Second},
		steps:    func(ok httptestutil.Step) []httptestutil.Step { return []httptestutil.Step{ok.Forever()} },
		sdkCheck: true, calls: 2, wantRequests: 1, wantErr: "rate limit",
		minTook: 0, maxTook: 0,
	}, {
		name:  "403 primary rate limit, reset in 3s: retried after the reset",
		quota: plenty,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{primaryLimit(3 * time.Second), ok.Forever()}
		},
		calls: 1, wantRequests: 2,
		minTook: 3 * time.Second, maxTook: 4 * time.Second,
	}, {
		name:  "403 secondary rate limit with Retry-After 5: retried after 5s",
		quota: plenty,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{secondaryLimit(5 * time.Second), ok.Forever()}
		},
		calls: 1, wantRequests: 2,
		minTook: 5 * time.Second, maxTook: 6 * time.Second,
	}, {
		name:  "403 primary rate limit, reset in an hour: handed back at once",
		quota: plenty,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{primaryLimit(time.Hour), ok.Forever()}
		},
		calls: 1, wantRequests: 1, wantErr: "rate limit",
		minTook: 0, maxTook: 0,
	}, {
		name:  "403 for a missing permission is not retried",
		quota: plenty,
		steps: func(ok httptestutil.Step) []httptestutil.Step {
			return []httptestutil.Step{forbidden(), ok.Forever()}
		},
		calls: 1, wantRequests: 1, wantErr: "forbidden",
		minTook: 0, maxTook: 0,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := &repos{quota: tt.quota}
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps(httptestutil.Handler(emu))...))
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.github.test", rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				client := NewClient(transport.Options{Base: base}).WithAuthToken("ghp_test")
				client.DisableRateLimitCheck = !tt.sdkCheck
				client.BaseURL, _ = url.Parse(srv.URL + "/")

				start := time.Now()
				var err error
				for i := range tt.calls {
					var repo *gh.Repository
					var resp *gh.Response
					repo, resp, err = client.Repositories.Get(context.Background(), "octo", "hello")
					if err != nil {
						break
					}
					if got, want := repo.GetFullName(), "octo/hello"; got != want {
						t.Errorf("call %d: repository %q, want %q", i+1, got, want)
					}
					if got, want := resp.Rate.Remaining, tt.quota.Remaining; got != want {
						t.Errorf("call %d: Response.Rate.Remaining = %d, want %d", i+1, got, want)
					}
				}
				took := time.Since(start)

				var rateErr *gh.RateLimitError
				var errResp *gh.ErrorResponse
				switch tt.wantErr {
				case "":
					if err != nil {
						t.Fatalf("got error %v, want none", err)
					}
				case "rate limit":
					if !errors.As(err, &rateErr) {
						t.Errorf("got error %v, want a *github.RateLimitError", err)
					}
				case "forbidden":
					if !errors.As(err, &errResp) || errResp.Response.StatusCode != 403 {
						t.Errorf("got error %v, want a *github.ErrorResponse with status 403", err)
					}
				}
				if got := rec.Count(); got != tt.wantRequests {
					t.Errorf("emulator got %d requests, want %d", got, tt.wantRequests)
				}
				if took < tt.minTook || took > tt.maxTook {
					t.Errorf("calls took %v, want within [%v, %v]", took, tt.minTook, tt.maxTook)
				}
			})
		})
	}
}
