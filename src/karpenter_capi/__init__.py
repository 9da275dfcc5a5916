"""karpenter-capi: a Karpenter-compatible node autoprovisioner for Cluster API clusters."""

__version__ = "0.1.0"
