"""A SieveMQ cluster: nodes coordinated through etcd, imported only with --cluster-etcd.

Built: membership (cluster/membership.py) over the etcd client (cluster/coordination.py) and
`sievemq cluster up` (cluster/local.py). Next: queue placement, the inter-node link,
definitions through etcd, replication (docs/cluster.md).
"""
