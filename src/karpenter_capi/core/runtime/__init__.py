"""The controller runtime: controllers over informer caches, run threaded or stepped."""
