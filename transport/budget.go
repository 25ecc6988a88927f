package transport

import (
	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/retry"
	"github.com/sturdyhttp/sturdy/policy"
)

// retryBudget is the per-host retry budget that [Retry] and [Hedge] draw
// on (see [retry.Budget]).
type retryBudget = retry.Budget

// budgetOf returns b as a retryBudget; nil when b is nil. Two results of
// one b are equal.
func budgetOf(b *policy.Budget) retryBudget { return retry.BudgetOf(b) }

// newSharedBudget returns a budget with b's settings whose hosts live in
// reg, beside each host's breaker and quota.
func newSharedBudget(b *policy.Budget, reg *hosts.Registry) retryBudget {
	return budgetOf(hosts.BudgetOn(b, reg).(*policy.Budget))
}
