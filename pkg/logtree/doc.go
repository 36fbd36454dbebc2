// Package logtree keeps the logs of a process in a tree keyed by DN, the
// dotted path of the component that wrote them (for a supervised runnable,
// its supervisor path such as "root.kubernetes.csi").
//
// Why a tree and not a plain logger: a node OS runs many long-lived
// components in one process. When one misbehaves, the operator (and the
// tests) want that component's recent history, optionally with everything
// below it, without grepping an interleaved stream. The tree keeps a bounded
// in-memory journal that can be read per DN or per subtree, and streamed live.
//
// Memory is bounded: the journal holds at most a fixed number of entries in
// total (oldest dropped first), and optionally at most a fixed number per DN
// so that one chatty component cannot evict everybody else's history.
// Writers never block on readers: a stream whose buffer is full drops entries
// and counts them.
package logtree
