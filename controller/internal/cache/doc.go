// Package cache holds what the controller's caches keep of each kind: the transforms that slim
// and intern the objects the manager's cache holds, and the Job cache beside it, which holds each
// managed Job as a CachedJob indexed by its owner.
package cache
