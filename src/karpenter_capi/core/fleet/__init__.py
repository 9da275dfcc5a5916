"""Fleet mode: one controller serving many Cluster API workload clusters (issue 28)."""
