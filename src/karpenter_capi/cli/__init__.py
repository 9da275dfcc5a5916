"""The ``karpenter-capi`` command line: one module per subcommand, below ``cli.entry``.

``entry`` builds the parser and runs a command (the console script and ``python -m
karpenter_capi`` call its ``main``); ``run``, ``explain``, ``simulate`` and ``info`` each hold
subcommands; ``clusters`` opens the clusters and plugins a command works on; ``options`` holds
the flags more than one command reads. Each imports only the modules below it (an import-linter
contract in pyproject.toml), so nothing is passed around as a callback to dodge a cycle.
"""

from karpenter_capi.cli.entry import main

__all__ = ["main"]
