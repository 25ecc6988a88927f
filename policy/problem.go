package policy

// PLACEHOLDER: replaced by the policy parsers work.
type Problem struct {
	Type, Title, Detail, Instance string
	Status                        int
	Retriable                     *bool
	Extensions                    map[string]any
}

func ParseProblem(contentType string, body []byte) (*Problem, error) { return nil, nil }
func IsProblem(contentType string) bool                                { return false }
