"""``karpenter-capi manifests``, ``plugins`` and ``instance-types``: what the product installs,
which plugins it would load, and what a NodeClass resolves to.

Kept together because each only prints (a table or JSON) and shares the table layout; none of
them runs a controller.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from karpenter_capi.cli.clusters import clients, load_plugins
from karpenter_capi.cli.options import plugin_names

if TYPE_CHECKING:
    from karpenter_capi.core.instancetype import InstanceType, InstanceTypeOverhead
    from karpenter_capi.core.provisioning.inventory import NodePoolInventory


def manifests_command(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.api.crds import crds_yaml, write_crds

    if args.split is not None:
        for path in write_crds(args.split):
            out.write(f"wrote {path}\n")
        return 0
    out.write(crds_yaml())
    return 0


def plugins_command(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.plugin_host import describe_plugins

    infos = describe_plugins(plugin_names(args))
    rows = [
        {
            "name": info.name,
            "enabled": info.enabled,
            "distribution": info.distribution,
            "version": info.version,
            "module": info.module,
            "error": info.error,
        }
        for info in infos
    ]
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
        return 0
    _print_table(
        out,
        ["NAME", "ENABLED", "DISTRIBUTION", "VERSION", "MODULE", "ERROR"],
        [
            [
                str(r["name"]),
                "yes" if r["enabled"] else "no",
                str(r["distribution"] or "-"),
                str(r["version"] or "-"),
                str(r["module"]),
                str(r["error"] or ""),
            ]
            for r in rows
        ],
    )
    return 0


def instance_types_command(args: argparse.Namespace, out: TextIO) -> int:
    from karpenter_capi.core.provisioning.inventory import resolve_inventory

    workload, management = clients(args)
    plugins = load_plugins(args, workload, management, read_only=True)
    inventories = resolve_inventory(workload, plugins, nodepool_name=args.nodepool)
    if args.json:
        json.dump([_inventory_json(inv) for inv in inventories], out, indent=2)
        out.write("\n")
        return 0
    for inv in inventories:
        out.write(f"NodePool {inv.nodepool} (NodeClass {inv.nodeclass})\n")
        if inv.error:
            out.write(f"  error: {inv.error}\n")
            continue
        rows = []
        for it in inv.instance_types:
            for off in it.offerings:
                rows.append(
                    [
                        it.name,
                        _fmt_resource(it, "cpu"),
                        _fmt_resource(it, "memory"),
                        _fmt_resource(it, "pods"),
                        off.zone,
                        off.capacity_type,
                        f"{off.price:.4f}",
                        "yes" if off.available else "no",
                        _source_cell(it.source, off.price_source),
                        _overhead_cell(it.overhead),
                    ]
                )
        _print_table(
            out,
            [
                "NAME",
                "CPU",
                "MEMORY",
                "PODS",
                "ZONE",
                "CAPACITY-TYPE",
                "PRICE",
                "AVAILABLE",
                "SOURCE",
                "OVERHEAD",
            ],
            rows,
            indent="  ",
        )
    return 0


def _source_cell(shape_source: str, price_source: str) -> str:
    """Where the shape and the price came from: ``AWS``, or ``annotation, price AWS``."""
    shape, price = shape_source or "-", price_source or "-"
    return shape if shape == price else f"{shape}, price {price}"


def _overhead_cell(overhead: InstanceTypeOverhead) -> str:
    """The overhead's total and where it came from: ``cpu=0,memory=100Mi (kubeadm default)``."""
    total = overhead.total().to_dict()
    parts = [f"{name}={total.pop(name, '0')}" for name in ("cpu", "memory")]
    parts += [f"{name}={value}" for name, value in sorted(total.items())]
    return f"{','.join(parts)} ({overhead.source or '-'})"


def _overhead_json(overhead: InstanceTypeOverhead) -> dict[str, Any]:
    return {
        "kubeReserved": overhead.kube_reserved.to_dict(),
        "systemReserved": overhead.system_reserved.to_dict(),
        "evictionThreshold": overhead.eviction_threshold.to_dict(),
        "total": overhead.total().to_dict(),
        "source": overhead.source,
    }


def _inventory_json(inventory: NodePoolInventory) -> dict[str, Any]:
    """``inventory.to_json()`` with each instance type's ``source`` and ``overhead`` and each
    offering's ``priceSource`` (provenance is display-only, so the core's JSON form leaves it
    out)."""
    doc: dict[str, Any] = inventory.to_json()
    for it, it_doc in zip(inventory.instance_types, doc["instanceTypes"], strict=True):
        it_doc["source"] = it.source
        it_doc["overhead"] = _overhead_json(it.overhead)
        for offering, offering_doc in zip(it.offerings, it_doc["offerings"], strict=True):
            offering_doc["priceSource"] = offering.price_source
    return doc


def _fmt_resource(instance_type: InstanceType, name: str) -> str:
    value = instance_type.capacity.get(name)
    return "-" if value is None else str(value)


def _print_table(
    out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = ""
) -> None:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in [list(header), *rows]:
        line = "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        out.write(indent + line.rstrip() + "\n")
