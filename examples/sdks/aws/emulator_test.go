package aws

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// dynamoDB emulates DynamoDB's PutItem on the AWS JSON 1.0 protocol: it
// stores each item it is sent, the side effect it counts, and answers
// "{}" with the x-amz-crc32 checksum the SDK verifies.
type dynamoDB struct {
	mu    sync.Mutex
	items []map[string]any
}

func (d *dynamoDB) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		awsError(w, http.StatusNotFound, "UnknownOperationException", "")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDEMULATOR/") {
		awsError(w, http.StatusBadRequest, "com.amazon.coral.service#MissingAuthenticationTokenException", "Request is missing Authentication Token")
		return
	}
	if got := r.Header.Get("X-Amz-Target"); got != "DynamoDB_20120810.PutItem" {
		awsError(w, http.StatusBadRequest, "com.amazon.coral.service#UnknownOperationException", "")
		return
	}
	var in struct {
		TableName string
		Item      map[string]any
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil || in.TableName == "" || len(in.Item) == 0 {
		awsError(w, http.StatusBadRequest, "com.amazon.coral.validate#ValidationException", "1 validation error detected: Value null at 'item' failed to satisfy constraint: Member must not be null")
		return
	}
	d.mu.Lock()
	d.items = append(d.items, in.Item)
	d.mu.Unlock()
	awsJSON(w, http.StatusOK, "{}")
}

// Stored reports how many items were stored.
func (d *dynamoDB) Stored() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.items)
}

// throughputExceeded is DynamoDB's throttling answer for a table over its
// provisioned capacity.
func throughputExceeded(w http.ResponseWriter, r *http.Request) {
	awsError(w, http.StatusBadRequest, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
		"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.")
}

// throttling is the throttling answer of DynamoDB's control plane (and of
// many AWS JSON services) for too high a request rate.
func throttling(w http.ResponseWriter, r *http.Request) {
	awsError(w, http.StatusBadRequest, "com.amazon.coral.availability#ThrottlingException", "Rate of requests exceeds the allowed throughput.")
}

// validation is a client error that no retry can fix.
func validation(w http.ResponseWriter, r *http.Request) {
	awsError(w, http.StatusBadRequest, "com.amazon.coral.validate#ValidationException", "One or more parameter values were invalid: Missing the key id in the item")
}

func awsError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]string{"__type": typ, "message": msg})
	awsJSON(w, status, string(b))
}

func awsJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", fmt.Sprintf("EMULATOR%08d", crc32.ChecksumIEEE([]byte(body))))
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10))
	w.WriteHeader(status)
	w.Write([]byte(body))
}
