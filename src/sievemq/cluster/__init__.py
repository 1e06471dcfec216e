"""A SieveMQ cluster: nodes coordinated through etcd, imported only with --cluster-etcd.

Built: membership (cluster/membership.py) over the etcd client (cluster/coordination.py),
queue placement (cluster/placement.py), every other definition through etcd
(cluster/definitions_mirror.py) and `sievemq cluster up` (cluster/local.py). Next: the
inter-node link, replication (docs/cluster.md).
"""
