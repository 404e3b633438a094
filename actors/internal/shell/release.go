package shell

import "github.com/asynkron/protoactor-go/actor"

// releaseProbe is sent to a stopped child to clear its PID's cached process (see Release).
// It is a dead letter by design, so it asks not to be logged as one.
type releaseProbe struct{}

func (releaseProbe) IgnoreDeadLetterLogging() {}

// Release lets a stopped child's actor be collected. It is called by its parent on the
// child's *actor.Terminated. protoactor's PID caches a pointer to its process, cleared only
// when the PID is next used after the process died, and the parent's children set keeps
// removed PIDs in its backing array: so a stopped child (its context, mailbox and actor, and
// all its closures hold) stayed reachable from its parent until that slot was reused. For an
// idle reader that was its resolution task, 1.4 KiB a stream; for a persist actor, whatever
// manifest it captured. Sending to the dead PID once clears the cache; the message goes to
// the dead-letter process and is not logged.
func Release(c actor.Context, pid *actor.PID) {
	if pid != nil {
		c.Send(pid, releaseProbe{})
	}
}
