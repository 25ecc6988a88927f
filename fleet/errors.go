package fleet

import "errors"

// ErrMalformed is matched by errors.Is when a key in Redis holds something
// fleet did not write: a value it cannot decode. (A key of another type
// fails with Redis's own WRONGTYPE error instead.)
// Such a key is treated as absent for the request at hand (the request
// goes out under local state) and the error, which names the key, goes to
// the OnError hook; it never causes a panic.
var ErrMalformed = errors.New("fleet: malformed value in Redis")
