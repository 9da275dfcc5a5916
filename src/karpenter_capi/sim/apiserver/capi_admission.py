"""Cluster API's defaulting and validating webhooks for MachineDeployment, MachineSet and
MachinePool, as rules the simulated API server runs (``pool_admission.PoolAdmission``).

Both webhooks are ``failurePolicy: Fail`` and registered for the resource at v1beta2
(``matchPolicy: Equivalent``: a write at v1beta1 is judged as converted), so an object a real
management cluster would refuse (no bootstrap, a selector its template's labels do not match,
a rollout that can never progress) must be refused here too, or the simulator proves nothing
about what the plugins and fixtures write. Objects arrive in the stored (v1beta2) layout.

Upstream, cluster-api core/webhooks/admission/:

- machinedeployment.go: ``MachineDeployment.Default`` (the ``cluster.x-k8s.io/cluster-name``
  label on the object, the selector and the template; the selector defaulted to the
  ``cluster.x-k8s.io/deployment-name`` label when empty; rollout strategy ``RollingUpdate``
  with ``maxSurge: 1``, ``maxUnavailable: 0``; a version without its ``v`` prefixed;
  ``calculateMachineDeploymentReplicas``) and ``MachineDeployment.validate`` (name a valid
  label value; ``validateRolloutStrategy``; the rules shared below);
- machineset.go: ``MachineSet.Default`` (the same labels, the selector defaulted to
  ``cluster.x-k8s.io/set-name``; ``calculateMachineSetReplicas``) and ``MachineSet.validate``;
- machinepool.go: ``MachinePool.Default`` (labels, ``calculateMachinePoolReplicas``,
  ``deletion.nodeDeletionTimeoutSeconds: 10`` from machine.go
  ``defaultNodeDeletionTimeoutSeconds``) and ``MachinePool.validate``;
- shared by the three ``validate``: a bootstrap ``configRef`` or ``dataSecretName``;
  ``spec.clusterName`` equal to the template's and immutable; a version starting with ``v``
  and semantic; for deployments and sets, the template's labels matched by ``spec.selector``.

Not run: machine naming templates, taints, remediation ``maxInFlight`` and the preflight-check
annotations (nothing the plugins or fixtures write), and the MachineSet name hashing of
``format.MustFormatValue`` (names here are short).
"""

from __future__ import annotations

import re
from typing import Any, Final

from karpenter_capi.core.values.selectors import SelectorError, selector_matches, selector_to_string
from karpenter_capi.sim.apiserver import messages
from karpenter_capi.sim.apiserver.messages import FieldError

JsonObject = dict[str, Any]

CLUSTER_NAME_LABEL: Final = "cluster.x-k8s.io/cluster-name"
MIN_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
_NAME_LABEL: Final = {
    "MachineDeployment": "cluster.x-k8s.io/deployment-name",
    "MachineSet": "cluster.x-k8s.io/set-name",
}
_DEFAULT_NODE_DELETION_TIMEOUT_SECONDS: Final = 10
_SEMVER: Final = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INT32: Final = re.compile(r"^[+-]?\d+$")
_LABEL_VALUE_HELP: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def webhook_name(kind: str, *, mutating: bool) -> str:
    """The name kube-apiserver quotes when the webhook denies a request."""
    return f"{'default' if mutating else 'validation'}.{kind.lower()}.cluster.x-k8s.io"


def semver(version: str) -> tuple[int, int, int] | None:
    """``semver.Parse`` of ``version`` without its ``v``: (major, minor, patch), or None."""
    parsed = _SEMVER.match(version)
    if parsed is None:
        return None
    major, minor, patch = (int(part) for part in parsed.groups()[:3])
    return major, minor, patch


def _dict(parent: JsonObject, key: str) -> JsonObject:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def _template_spec(obj: JsonObject) -> JsonObject:
    found = ((obj.get("spec") or {}).get("template") or {}).get("spec")
    return found if isinstance(found, dict) else {}


# ----------------------------------------------------------------------------- Default


class DefaultingError(Exception):
    """``Default`` returned an error: the mutating webhook denies the request with it."""


def _parse_size(kind: str, annotation: str, text: str) -> int:
    if _INT32.match(text) is None or not -(2**31) <= int(text) < 2**31:
        why = "invalid syntax" if _INT32.match(text) is None else "value out of range"
        raise DefaultingError(
            f"failed to caculate {kind} replicas value: could not parse the value of the "
            f'"{annotation}" annotation: strconv.ParseInt: parsing "{text}": {why}'
        )
    return int(text)


def default_replicas(kind: str, obj: JsonObject, old: JsonObject | None) -> int:
    """``calculate<Kind>Replicas``: the replicas an object without ``spec.replicas`` gets."""
    spec = obj.get("spec") or {}
    if spec.get("replicas") is not None:
        return int(spec["replicas"])
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if MIN_SIZE not in annotations or MAX_SIZE not in annotations:
        return 1
    low = _parse_size(kind, MIN_SIZE, str(annotations[MIN_SIZE]))
    high = _parse_size(kind, MAX_SIZE, str(annotations[MAX_SIZE]))
    previous = None if old is None else (old.get("spec") or {}).get("replicas")
    if previous is None or previous < low:
        return low
    return high if previous > high else int(previous)


def default(kind: str, obj: JsonObject, old: JsonObject | None) -> None:
    """``<Kind>.Default``, in place on ``obj`` (v1beta2 layout)."""
    spec = _dict(obj, "spec")
    cluster = str(spec.get("clusterName") or "")
    _dict(obj["metadata"], "labels")[CLUSTER_NAME_LABEL] = cluster
    spec["replicas"] = default_replicas(kind, obj, old)
    machine = _dict(_dict(spec, "template"), "spec")
    version = machine.get("version")
    if isinstance(version, str) and version and not version.startswith("v"):
        machine["version"] = "v" + version
    if kind == "MachinePool":
        deletion = _dict(machine, "deletion")
        if deletion.get("nodeDeletionTimeoutSeconds") is None:
            deletion["nodeDeletionTimeoutSeconds"] = _DEFAULT_NODE_DELETION_TIMEOUT_SECONDS
        return
    if kind == "MachineDeployment":
        _default_rollout(spec)
    selector = _dict(spec, "selector")
    match_labels = _dict(selector, "matchLabels")
    template_labels = _dict(_dict(spec["template"], "metadata"), "labels")
    if not match_labels and not selector.get("matchExpressions"):
        name = str(obj["metadata"].get("name") or "")
        match_labels[_NAME_LABEL[kind]] = name
        template_labels[_NAME_LABEL[kind]] = name
    if kind == "MachineDeployment":  # (upstream's MachineSet.Default does not do this)
        match_labels[CLUSTER_NAME_LABEL] = cluster
        template_labels[CLUSTER_NAME_LABEL] = cluster


def _default_rollout(spec: JsonObject) -> None:
    """A MachineDeployment's rollout strategy: RollingUpdate, surge 1, none unavailable."""
    strategy = _dict(_dict(spec, "rollout"), "strategy")
    if not strategy.get("type"):
        strategy["type"] = "RollingUpdate"
    if strategy["type"] == "RollingUpdate":
        rolling = _dict(strategy, "rollingUpdate")
        for field, value in (("maxSurge", 1), ("maxUnavailable", 0)):
            if rolling.get(field) is None:
                rolling[field] = value


# ---------------------------------------------------------------------------- validate


def _int_or_percent_error(value: Any) -> str | None:
    """``intstr.GetScaledValueFromIntOrPercent``'s error for ``value``, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return "invalid value for IntOrString: invalid type: neither int nor percentage"
    if isinstance(value, int):
        return None
    if not value.endswith("%"):
        return "invalid value for IntOrString: invalid type: string is not a percentage"
    number = value[:-1]
    if _INT32.match(number) is None:
        return (
            f'invalid value for IntOrString: invalid value "{value}": strconv.Atoi: parsing '
            f'"{number}": invalid syntax'
        )
    return None


def _rollout_strategy(spec: JsonObject) -> list[FieldError]:
    """``validateRolloutStrategy``."""
    path = "spec.rollout.strategy.rollingUpdate"
    rolling = (((spec.get("rollout") or {}).get("strategy") or {}).get("rollingUpdate")) or {}
    errors: list[FieldError] = []
    for field in ("maxUnavailable", "maxSurge"):
        if rolling.get(field) is None:
            continue
        why = _int_or_percent_error(rolling[field])
        if why is not None:
            errors.append(
                messages.invalid_value(
                    f"{path}.{field}",
                    str(rolling[field]),
                    f"must be either an int or a percentage: {why}",
                )
            )
    surge, unavailable = rolling.get("maxSurge"), rolling.get("maxUnavailable")
    if surge == 0 and unavailable == 0 and type(surge) is int and type(unavailable) is int:
        errors.append(
            messages.invalid_value(path, "0", "maxUnavailable and maxSurge cannot both be 0")
        )
    return errors


def _go_map(labels: JsonObject) -> str:
    """A ``map[string]string`` as Go's ``%#v`` prints it (what ``field.Invalid`` shows)."""
    pairs = ",".join(f'"{key}":"{labels[key]}"' for key in sorted(labels))
    return f"map[string]string{{{pairs}}}"


def _selector(kind: str, spec: JsonObject) -> list[FieldError]:
    selector = spec.get("selector") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    try:
        if selector_matches(selector, labels, nil_matches=True):
            return []
        shown = selector_to_string(selector)
    except SelectorError as error:
        return [messages.invalid_value("spec.selector", str(selector), str(error))]
    detail = f'must match spec.selector "{shown}"'
    path = "spec.template.metadata.labels"
    if kind == "MachineDeployment":
        return [messages.forbidden_field(path, detail)]
    return [FieldError(path, "FieldValueInvalid", f"Invalid value: {_go_map(labels)}: {detail}")]


def _bootstrap(obj: JsonObject) -> list[FieldError]:
    bootstrap = _template_spec(obj).get("bootstrap") or {}
    config_ref = bootstrap.get("configRef")
    if (isinstance(config_ref, dict) and config_ref.get("name")) or (
        bootstrap.get("dataSecretName") is not None
    ):
        return []
    return [
        messages.required(
            "spec.template.spec.bootstrap",
            "expected either spec.template.spec.bootstrap.dataSecretName or "
            "spec.template.spec.bootstrap.configRef to be populated",
        )
    ]


def _cluster_name(obj: JsonObject, old: JsonObject | None) -> list[FieldError]:
    cluster = (obj.get("spec") or {}).get("clusterName")
    errors: list[FieldError] = []
    if old is not None and (old.get("spec") or {}).get("clusterName") != cluster:
        errors.append(messages.forbidden_field("spec.clusterName", "field is immutable"))
    if cluster != _template_spec(obj).get("clusterName"):
        errors.append(
            messages.invalid_value(
                "spec.clusterName",
                cluster,
                "spec.clusterName and spec.template.spec.clusterName must be set to the same value",
            )
        )
    return errors


def _version(obj: JsonObject) -> list[FieldError]:
    version = str(_template_spec(obj).get("version") or "")
    if not version:
        return []
    path = "spec.template.spec.version"
    errors: list[FieldError] = []
    if not version.startswith("v"):
        errors.append(messages.invalid_value(path, version, "must start with v"))
    if semver(version.removeprefix("v")) is None:
        errors.append(messages.invalid_value(path, version, "must be a valid semantic version"))
    return errors


def _name_is_label_value(obj: JsonObject) -> list[FieldError]:
    name = str(obj["metadata"].get("name") or "")
    if len(name) > 63:
        why = "must be no more than 63 characters"
    elif _LABEL_VALUE.match(name) is None:
        why = _LABEL_VALUE_HELP
    else:
        return []
    return [messages.invalid_value("metadata.name", name, f"must be a valid label value: {why}")]


def validate(kind: str, obj: JsonObject, old: JsonObject | None) -> list[FieldError]:
    """``<Kind>.validate``'s causes, in upstream's order."""
    spec = obj.get("spec") or {}
    if kind == "MachinePool":
        return [*_bootstrap(obj), *_cluster_name(obj, old), *_version(obj)]
    if kind == "MachineSet":
        return [
            *_bootstrap(obj),
            *_selector(kind, spec),
            *_cluster_name(obj, old),
            *_version(obj),
        ]
    return [
        *_name_is_label_value(obj),
        *_bootstrap(obj),
        *_selector(kind, spec),
        *_cluster_name(obj, old),
        *_rollout_strategy(spec),
        *_version(obj),
    ]
