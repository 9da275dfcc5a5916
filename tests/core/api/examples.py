"""Realistic manifests shaped like upstream Karpenter's and Cluster API's documentation."""

from __future__ import annotations

from typing import Any

import yaml

NODEPOOL_YAML = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  uid: 8c1a7f8e-2b1d-4f55-9a77-0b8c1f0d2e11
  resourceVersion: "12345"
  generation: 3
  creationTimestamp: "2024-02-02T19:50:00Z"
  annotations:
    karpenter.sh/nodepool-hash: "6821555240594823858"
    karpenter.sh/nodepool-hash-version: v3
spec:
  template:
    metadata:
      labels:
        billing-team: my-team
        node.kubernetes.io/role: worker
      annotations:
        example.com/owner: my-team
    spec:
      nodeClassRef:
        group: karpenter.cluster.x-k8s.io
        kind: ClusterAPINodeClass
        name: default
      taints:
        - key: example.com/special-taint
          value: "true"
          effect: NoSchedule
      startupTaints:
        - key: example.com/another-taint
          effect: NoSchedule
      expireAfter: 720h
      terminationGracePeriod: 48h
      requirements:
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["m5.large", "m5.xlarge", "c5.large", "c5.xlarge"]
          minValues: 2
        - key: example.com/instance-generation
          operator: Gt
          values: ["2"]
        - key: topology.kubernetes.io/zone
          operator: In
          values: ["us-west-2a", "us-west-2b"]
        - key: kubernetes.io/arch
          operator: In
          values: ["arm64", "amd64"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot", "on-demand", "reserved"]
        - key: example.com/gpu
          operator: DoesNotExist
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
      - nodes: 10%
      - nodes: "0"
        schedule: "0 9 * * mon-fri"
        duration: 8h
        reasons: [Drifted, Underutilized]
  limits:
    cpu: "1000"
    memory: 1000Gi
  weight: 10
status:
  resources:
    cpu: "20"
    memory: 8192Mi
    ephemeral-storage: 100Gi
    nodes: "5"
  nodes: 5
  conditions:
    - type: Ready
      status: "True"
      observedGeneration: 3
      lastTransitionTime: "2024-02-02T19:54:34Z"
      reason: Ready
      message: ""
    - type: NodeClassReady
      status: "True"
      observedGeneration: 3
      lastTransitionTime: "2024-02-02T19:54:34Z"
      reason: NodeClassReady
      message: ""
"""

NODECLAIM_YAML = """
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-sfpsl
  labels:
    karpenter.sh/nodepool: default
    karpenter.sh/capacity-type: spot
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-west-2b
    kubernetes.io/arch: amd64
  annotations:
    karpenter.sh/nodepool-hash: "6821555240594823858"
    karpenter.sh/nodepool-hash-version: v3
  finalizers:
    - karpenter.sh/termination
  ownerReferences:
    - apiVersion: karpenter.sh/v1
      blockOwnerDeletion: true
      kind: NodePool
      name: default
      uid: 8c1a7f8e-2b1d-4f55-9a77-0b8c1f0d2e11
spec:
  expireAfter: Never
  nodeClassRef:
    group: karpenter.cluster.x-k8s.io
    kind: ClusterAPINodeClass
    name: default
  requirements:
    - key: karpenter.sh/nodepool
      operator: In
      values: [default]
    - key: node.kubernetes.io/instance-type
      operator: In
      values: [m5.large, m5.xlarge]
      minValues: 2
  resources:
    requests:
      cpu: 1510m
      memory: 1Gi
      pods: "8"
  startupTaints:
    - key: karpenter.sh/unregistered
      effect: NoExecute
status:
  providerID: aws:///us-west-2b/i-0d8e1d8d4f9a1a2b3
  imageID: ami-0c3f8d3b4e5a6f7a8
  nodeName: ip-192-168-71-87.us-west-2.compute.internal
  allocatable:
    cpu: 1930m
    memory: 6903Mi
    pods: "29"
  capacity:
    cpu: "2"
    memory: 7577Mi
    pods: "29"
  lastPodEventTime: "2024-02-02T20:01:02Z"
  conditions:
    - type: Launched
      status: "True"
      lastTransitionTime: "2024-02-02T19:54:34Z"
      reason: Launched
      message: ""
    - type: Registered
      status: "True"
      lastTransitionTime: "2024-02-02T19:55:20Z"
      reason: Registered
      message: ""
    - type: Ready
      status: "True"
      lastTransitionTime: "2024-02-02T19:55:40Z"
      reason: Ready
      message: ""
"""

NODECLASS_YAML = """
apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
kind: ClusterAPINodeClass
metadata:
  name: default
spec:
  scalableResourceSelector:
    matchLabels:
      node.cluster.x-k8s.io/karpenter-member: ""
    matchExpressions:
      - key: cluster.x-k8s.io/cluster-name
        operator: In
        values: [prod]
"""


def load(text: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(text)
    return data
