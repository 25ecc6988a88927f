package hosts

// BudgetOn returns a *policy.Budget with the settings of b, a
// *policy.Budget, that keeps its hosts in reg. Package policy sets it, so
// that transport.New can keep each host's budget beside its breaker and
// quota without the registry, an internal type, in policy's public API.
var BudgetOn func(b any, reg *Registry) any
