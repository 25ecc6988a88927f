package github

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
)

// repos emulates GET /repos/{owner}/{repo}: GitHub's repository JSON with
// its X-RateLimit-* headers, reporting quota.
type repos struct {
	quota  httptestutil.Quota
	served atomic.Int64
}

func (rp *repos) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/repos/"), "/")
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/repos/") || len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		githubError(w, http.StatusNotFound, "Not Found", "https://docs.github.com/rest")
		return
	}
	owner, repo := parts[0], parts[1]
	rp.served.Add(1)
	httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyGitHub, rp.quota, time.Now())
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	json.NewEncoder(w).Encode(map[string]any{
		"id":             1296269,
		"name":           repo,
		"full_name":      owner + "/" + repo,
		"private":        false,
		"default_branch": "main",
		"owner":          map[string]any{"login": owner, "id": 1, "type": "User"},
	})
}

// primaryLimit is GitHub's answer when the primary rate limit is spent:
// 403, X-RateLimit-Remaining: 0 and the reset after reset.
func primaryLimit(reset time.Duration) httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyGitHub, httptestutil.Quota{Limit: 5000, Remaining: 0, Reset: reset}, time.Now())
		githubError(w, http.StatusForbidden, "API rate limit exceeded for user ID 1.",
			"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api")
	}))
}

// secondaryLimit is GitHub's answer for a secondary rate limit: 403 with
// Retry-After.
func secondaryLimit(retryAfter time.Duration) httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyGitHub, httptestutil.Quota{Limit: 5000, Remaining: 4000, Reset: time.Hour}, time.Now())
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		githubError(w, http.StatusForbidden, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
			"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits")
	}))
}

// forbidden is a 403 that no wait fixes: a missing permission.
func forbidden() httptestutil.Step {
	return httptestutil.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httptestutil.QuotaHeaders(w.Header(), httptestutil.FamilyGitHub, httptestutil.Quota{Limit: 5000, Remaining: 4999, Reset: time.Hour}, time.Now())
		githubError(w, http.StatusForbidden, "Resource not accessible by integration", "https://docs.github.com/rest/repos/repos#get-a-repository")
	}))
}

func githubError(w http.ResponseWriter, status int, msg, doc string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"message": msg, "documentation_url": doc})
}
