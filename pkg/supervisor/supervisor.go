// Package supervisor runs the long-lived parts of a node (its "runnables")
// as a tree, restarting whatever fails.
//
// Why a tree: components depend on each other in a hierarchy (the
// Kubernetes runnable builds a clientset that its controllers share). When a
// runnable fails, everything it started is stale, so its whole subtree is
// stopped (deepest first) and awaited before the runnable itself is restarted
// with exponential backoff. Siblings and ancestors keep running.
//
// Rules for a runnable:
//   - It runs until its context is cancelled, then returns promptly.
//   - It starts children with Run/RunGroup using the context it was given.
//   - It calls Signal(ctx, SignalHealthy) once it is ready; that resets the
//     backoff if it then stays healthy for a while.
//   - A runnable that has finished its job calls Signal(ctx, SignalDone) and
//     returns nil. That ends it for good: it is not restarted, and its
//     children (if any) are stopped, because "done" means the runnable and its
//     subtree have nothing left to do.
//   - Returning an error, returning nil without SignalDone, or panicking is a
//     failure and causes a restart.
//
// A node's context is cancelled only by the supervisor: when the node's
// parent stops or restarts, when the node itself has returned, or when the
// context given to New ends. The tree is stopped deepest first: a runnable's
// context is cancelled only once all its descendants have returned, so a
// parent may still use resources its children rely on while they shut down.
//
// All tree state is owned by one goroutine per Supervisor (an actor); the
// exported functions talk to it over channels. There is no global state: the
// node a context belongs to travels in the context.
package supervisor
