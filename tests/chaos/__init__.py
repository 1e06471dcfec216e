"""The chaos suite: a three-node cluster and etcd in a private network namespace, faults
injected while clients publish and consume, and checkers over the whole history
(docs/testing.md, "The chaos suite")."""
