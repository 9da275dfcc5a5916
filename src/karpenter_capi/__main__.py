"""``python -m karpenter_capi``: the ``karpenter-capi`` command without its console script
(a checkout with no install, or an interpreter other than the one the script was made for)."""

import sys

from karpenter_capi.cli import main

if __name__ == "__main__":
    sys.exit(main())
