package state

import "errors"

// ErrLost is the read of a state that is missing although an apply of the object once succeeded
// (the durable inputs Secret carries captf.io/applied). Applying again would create the
// infrastructure a second time, so nothing is applied and deletion is held until the state is
// restored or the infrastructure abandoned.
var ErrLost = errors.New("the state is missing although an apply once succeeded")
