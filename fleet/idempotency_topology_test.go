package fleet

import (
	"reflect"
	"testing"
)

// CLUSTER NODES is read for how many replicas each primary's slots have:
// failed replicas count, as they may come back and be promoted; a failed
// primary without slots (replaced in a failover) serves nothing; slots
// being migrated or imported are skipped; bad input is an error.
func TestParseClusterNodes(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []shard
		err  bool
	}{
		{
			name: "one primary, no replica",
			text: "txt:07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 myself,master - 0 0 1 connected 0-16383\r\n",
			want: []shard{{0, 16383, 0}},
		},
		{
			name: "two primaries, a replica up and one failed",
			text: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-8000 8002\n" +
				"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 8001 8003-16383 [8004->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]\n" +
				"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 1 connected\n" +
				"6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 slave,fail 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 2 disconnected\n",
			want: []shard{{0, 8000, 1}, {8002, 8002, 1}, {8001, 8001, 1}, {8003, 16383, 1}},
		},
		{
			name: "after a takeover: the old primary failed, without slots",
			text: "a1 127.0.0.1:1@2 myself,master - 0 0 2 connected 0-16383\nb2 127.0.0.1:3@4 master,fail - 0 0 1 disconnected\n",
			want: []shard{{0, 16383, 0}},
		},
		{name: "empty", text: "", want: []shard{}},
		{name: "short line", text: "a1 127.0.0.1:1@2 master -\n", err: true},
		{name: "bad slot", text: "a1 127.0.0.1:1@2 master - 0 0 1 connected 0-x\n", err: true},
		{name: "slot out of range", text: "a1 127.0.0.1:1@2 master - 0 0 1 connected 0-16384\n", err: true},
		{name: "reversed range", text: "a1 127.0.0.1:1@2 master - 0 0 1 connected 9-3\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseClusterNodes(tt.text)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if !tt.err && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
