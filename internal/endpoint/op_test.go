package endpoint

import "testing"

// An Op records the addresses tried and what served the operation; a
// nil Op records nothing, and asking it costs nothing.
func TestOp(t *testing.T) {
	var none *Op
	none.AddTried(&Pool{})
	none.Served("https://a.test", "10.0.0.1")
	if got := none.Tried(); got != nil {
		t.Errorf("nil Op tried %v; want nil", got)
	}
	op := &Op{}
	p1, p2 := &Pool{}, &Pool{}
	op.AddTried(p1)
	tried := op.Tried()
	op.AddTried(p2)
	if len(tried) != 1 || tried[0] != p1 || len(op.Tried()) != 2 {
		t.Errorf("tried %d then %d; want a snapshot of 1, then 2", len(tried), len(op.Tried()))
	}
	op.Served("https://b.test", "")
	op.Served("", "10.0.0.2")
	if origin, addr := op.ServedBy(); origin != "https://b.test" || addr != "10.0.0.2" {
		t.Errorf("ServedBy = %q, %q; want https://b.test, 10.0.0.2", origin, addr)
	}
}
