"""A SieveMQ cluster: nodes coordinated through etcd, imported only with --cluster-etcd.

Built: membership (cluster/membership.py) over the etcd client (cluster/coordination.py),
`sievemq cluster up` (cluster/local.py), queue placement (cluster/placement.py), every other
definition through etcd (cluster/definitions_mirror.py), the inter-node link (cluster/link.py,
cluster/secret.py) and publish forwarding (cluster/forwarding.py). Next: consumers over the
link, replication (docs/cluster.md).
"""
